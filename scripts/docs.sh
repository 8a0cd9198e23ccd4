#!/usr/bin/env bash
# The API reference: a static site built from the docstrings with pdoc, then checked for broken
# links.
#   bash scripts/docs.sh [OUTPUT_DIR]     build into OUTPUT_DIR (default docs/_build; a relative
#                                         path is taken from the repository root), then check
#   bash scripts/docs.sh --check SITE     only check an already built site
# Documents the public modules only (pdoc skips every name starting with "_"); exits non-zero,
# listing each one, when a page links to a page or an anchor the site does not have.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
check_only=false
if [ "${1:-}" = --check ]; then
  check_only=true
  shift
fi
out=${1:-docs/_build}
if ! $check_only; then
  if ! "$python" -c "import pdoc" 2>/dev/null; then
    echo "docs.sh: pdoc is not installed: $python -m pip install pdoc" >&2
    exit 2
  fi
  rm -rf "$out"
  # topology_torch.ops and .recovery come with topology_torch (they are in its __all__); demo.py
  # is a script.
  "$python" -m pdoc --docformat google --no-show-source --footer-text rank-topology \
    --template-directory docs/_templates --output-directory "$out" \
    topology topology.cost topology.strategies \
    topology_torch topology_torch.layers topology_torch.transfer \
    topology_torch.compat.megatron topology_torch.compat.ezpz topology_torch.compat.ml \
    '!topology_torch\.demo$'
fi
"$python" - "$out" <<'PY'
"""Every relative link of the site names a page it has and, after '#', an id on that page."""

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.ids.update(v for k, v in values.items() if k in ("id", "name") and v)
        if tag == "a" and values.get("href") is not None:
            self.hrefs.append(values["href"] or "")


site = Path(sys.argv[1]).resolve()
pages: dict[Path, Page] = {}
for file in sorted(site.rglob("*.html")):
    pages[file] = page = Page()
    page.feed(file.read_text(encoding="utf-8"))
private = [str(f.relative_to(site)) for f in pages if any(p.startswith("_") for p in f.parts)]
broken = [f"{name}: a private module has a page" for name in private]
for file, page in pages.items():
    for href in page.hrefs:
        if urlsplit(href).scheme:  # https:, mailto:, data: leave the site
            continue
        path, fragment = urldefrag(href)
        target = (file.parent / unquote(path)).resolve() if path else file
        where = f"{file.relative_to(site)}: link {href!r}"
        if target not in pages:
            broken.append(f"{where} names no page of the site")
        elif fragment and unquote(fragment) not in pages[target].ids:
            broken.append(f"{where} names no anchor of {target.relative_to(site)}")
if broken:
    print(f"docs.sh: {len(broken)} broken link(s) in {site}:", *broken, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"docs.sh: {len(pages)} pages, every link resolves: {site}/index.html")
PY
