"""``place`` hands the launcher what it runs: ``--write-hostfile FILE --format hostfile|slurm``
(slurm: one line per task, as ``SLURM_HOSTFILE`` with ``srun --distribution=arbitrary`` reads
it), read back by ``--host-order``; hosts of different GPU counts placed where the hostfile
says how many ranks each runs."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_cli_allocation import assert_invalid, invoke, run_json


def _hostfile(path: Path, gpus: list[int]) -> Path:
    """A hostfile of hosts ``h1 ..`` with ``gpus[i]`` slots each."""
    path.write_text("".join(f"h{i + 1} slots={g}\n" for i, g in enumerate(gpus)))
    return path


def _expected(hosts: list[str], slots: list[int], form: str) -> list[str]:
    """The lines of each format, written here from the formats' definitions."""
    if form == "hostfile":
        return [f"{h} slots={s}" for h, s in zip(hosts, slots, strict=True)]
    return [h for h, s in zip(hosts, slots, strict=True) for _ in range(s)]


@settings(max_examples=25, deadline=None)
@given(
    gpus=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    data=st.data(),
    form=st.sampled_from(["hostfile", "slurm"]),
)
def test_written_hostfile_runs_the_world_and_reads_back(
    tmp_path_factory: object, gpus: list[int], data: st.DataObject, form: str
) -> None:
    """Law: the file holds every rank once (slurm: world_size lines; hostfile: slots summing
    to world_size, each at most the host's GPUs), in the JSON's host order, and --host-order
    reads it back as the same order and crossings."""
    base = tmp_path_factory.mktemp("launch")  # type: ignore[attr-defined]
    world = data.draw(st.integers(1, sum(gpus)), label="world")
    source = _hostfile(base / "in.txt", gpus)
    out = base / "out.txt"
    argv = ("-w", str(world), "--hostfile", str(source))
    placed = run_json("place", *argv, "--write-hostfile", str(out), "--format", form)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines == _expected(placed["hosts"], placed["slots"], form)
    assert sum(placed["slots"]) == world
    given_gpus = {f"h{i + 1}": g for i, g in enumerate(gpus)}
    assert all(s <= given_gpus[h] for h, s in zip(placed["hosts"], placed["slots"], strict=True))
    shown = run_json("show", *argv, "--host-order", str(out))
    assert [h["name"] for h in shown["allocation"]["rank_map"]["hosts"]] == placed["hosts"]


def test_slurm_format_repeats_each_host_per_task(tmp_path: Path) -> None:
    """Golden: 10 ranks on three 4-GPU hosts, slurm format: 4, 4 and 2 lines."""
    out = tmp_path / "tasks"
    code, _, err = invoke(
        "place", "-w", "10", "--tp", "2", "--hosts", "n[1-3]", "--gpus-per-host", "4",
        "--write-hostfile", str(out), "--format", "slurm",
    )  # fmt: skip
    assert code == 0, err
    assert out.read_text() == "n1\n" * 4 + "n2\n" * 4 + "n3\n" * 2


def test_host_order_refuses_slots_the_order_does_not_run(tmp_path: Path) -> None:
    """A --host-order whose slots disagree with the ranks the hosts run is exit 2, one line."""
    order = tmp_path / "order"
    order.write_text("n2 slots=4\nn1 slots=2\n")
    argv = ("check", "-w", "8", "--hosts", "n[1-2]", "--gpus-per-host", "4")
    assert_invalid((*argv, "--host-order", str(order)), "n1", "2 ranks", "fill it with 4")
