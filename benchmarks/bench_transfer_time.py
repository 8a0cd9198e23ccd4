"""The predicted refit time of a Kimi-K2-sized model next to its lower bound and Perplexity's
published 1.3 s, and the bytes our plans put on the wire next to Megatron M2N's buffer sizing.

Model: Kimi-K2 (Moonshot AI 2025, its Hugging Face ``config.json``): 61 layers, hidden 7168,
vocabulary 163,840, multi-head latent attention as DeepSeek-V3's (64 heads; q rank 1536, kv rank
512, nope 128, rope 64, v 128), 384 routed experts of width 2048 in each of 60 MoE layers with one
shared expert of width 2048, the first layer dense (width 18,432), top-8; bf16. Built here as an
:class:`~topology.Architecture` (no preset has it): 1.03e12 weights, 2.06 TB.

Layouts (``--from`` / ``--to``), apart (the engine on the next 128 ranks):

- training, 256 ranks: ``pp=16,ep=16,etp=1`` (dp 16): the Kimi-K2 report's "16-way pipeline
  parallelism with virtual stages, 16-way expert parallelism and ZeRO-1 data parallelism"
  (without the virtual stages; 61 layers over 16 stages, the longer stages first);
- engine, 128 ranks: ``tp=8,ep=128,etp=1`` (dp 16): attention tensor-parallel inside each 8-GPU
  host, every expert on one GPU (3 per GPU), as wide expert parallelism serves DeepSeek-V3-class
  models; and, for contrast, ``tp=4,ep=128,etp=1`` (two attention replicas per host).

Allocation: hosts of 8 GPUs, 32 for training then 16 for the engine, each host's NVLink its
domain; links of ``topology.cost.H100_NODE``: 8 x 400 Gb/s NICs per host (50 GB/s per GPU) and
NVLink 450 GB/s per GPU, each way. Each engine layout is planned twice: without and with the relay
step (``transfer(..., relay=True)``: a weight every GPU of an engine host holds whole, MLA's
down-projections, routers, norms, enters the host's NICs once, then crosses NVLink; the
prediction adds the relay copies' stage after the network's). Predicted time and bound:
``topology.transfer_time`` (model and bound in ``topology._transfer.timing``). Reference:
Perplexity moves Kimi-K2 from 256 training GPUs to 128 inference GPUs in 1.3 s over RDMA
(Perplexity research, "Weight transfer for RL post-training in under 2 seconds", 2025): a
measured time on their hardware, shown beside our prediction, not computed by it.

Wire bytes: for tp8 -> tp8 and tp8 -> tp4 x dp2 (apart, 8 -> 8 ranks), the bytes our plan moves
against Megatron's M2N refit sizing (``refit_method="nccl_m2n"``, Megatron-LM #6712), which sizes
a call as ``src_count x dst_count x max_pair_bytes``: the senders, the receivers and the most
bytes one (sender, receiver) pair exchanges, all three taken from our plan's operations.

Run: ``python benchmarks/bench_transfer_time.py [--out benchmarks/results/transfer_time.json]``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_seconds, write_result

from topology import Allocation, Architecture, Host, Topology, transfer, transfer_time, weights
from topology.cost import H100_NODE

KIMI_K2 = Architecture(
    61,
    7168,
    163840,
    18432,
    64,
    64,
    128,
    experts=384,
    moe_ffn=2048,
    dense_layers=1,
    shared_ffn=2048,
    mla=(1536, 512, 128, 64, 128),
    top_k=8,
)
TRAIN = Topology(256, pp=16, ep=16, etp=1)
ENGINES = {
    "tp=8,ep=128,etp=1": Topology(128, tp=8, ep=128, etp=1, rank_offset=256),
    "tp=4,ep=128,etp=1": Topology(128, tp=4, ep=128, etp=1, rank_offset=256),
}
PERPLEXITY_SECONDS = 1.3
"""Perplexity's published Kimi-K2 refit, 256 training GPUs -> 128 inference GPUs (RDMA)."""
GOAL = 1.05


def hosts(ranks: int, gpus: int = 8) -> Allocation:
    """``ranks / gpus`` hosts of ``gpus`` GPUs, no tiers: each host is its NVLink domain."""
    return Allocation([Host(f"n{i}", gpus) for i in range(-(-ranks // gpus))])


def kimi_rows(repeat: int) -> list[dict[str, Any]]:
    """Each engine layout's plan, its predicted seconds, the bound and the resources."""
    params = weights(KIMI_K2)
    alloc = hosts(256 + 128)
    rows = []
    for (name, engine), relay in itertools.product(ENGINES.items(), (False, True)):
        plan = transfer(TRAIN, engine, params, allocation=alloc, relay=relay)
        timed = transfer_time(
            plan,
            alloc,
            nic_bandwidth=H100_NODE.inter.bandwidth,
            nvlink_bandwidth=H100_NODE.intra.bandwidth,
        )
        rows.append(
            {
                "from": "pp=16,ep=16,etp=1",
                "to": name,
                "relay": relay,
                "weights": len(params),
                "model_bytes": sum(p.nbytes for p in params),
                "bytes_total": plan.stats["bytes_total"],
                **timed.to_dict(),
                "within_goal": timed.ratio <= GOAL,
                "relay_ops": plan.stats.get("relay_ops", 0),
                "plan_and_time_seconds": median_seconds(
                    lambda e=engine, r=relay: transfer_time(
                        transfer(TRAIN, e, params, allocation=alloc, relay=r),
                        alloc,
                        nic_bandwidth=H100_NODE.inter.bandwidth,
                        nvlink_bandwidth=H100_NODE.intra.bandwidth,
                    ),
                    repeat,
                ),
            }
        )
    return rows


def wire_rows() -> list[dict[str, Any]]:
    """Our plan's bytes against ``src_count x dst_count x max_pair_bytes``, from the plan."""
    rows = []
    for model, params in (("kimi-k2", weights(KIMI_K2)), ("llama-70b", weights("llama-70b"))):
        for name, dst in (
            ("tp8 -> tp8", Topology(8, tp=8, rank_offset=8)),
            ("tp8 -> tp4 x dp2", Topology(8, tp=4, rank_offset=8)),
        ):
            plan = transfer(Topology(8, tp=8), dst, params)
            pairs: dict[tuple[int, int], int] = defaultdict(int)
            for row in plan.rows:
                pairs[row[0], row[1]] += row[7]
            senders = len({s for s, _ in pairs})
            receivers = len({r for _, r in pairs})
            m2n = senders * receivers * max(pairs.values())
            total = plan.stats["bytes_total"]
            rows.append(
                {
                    "model": model,
                    "layouts": name,
                    "ours_bytes": total,
                    "senders": senders,
                    "receivers": receivers,
                    "max_pair_bytes": max(pairs.values()),
                    "m2n_bytes": m2n,
                    "m2n_over_ours": m2n / total,
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/transfer_time.json")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    kimi = kimi_rows(args.repeat)
    print("Kimi-K2 (2.06 TB bf16), 256 training ranks -> 128 engine ranks, 8-GPU hosts,")
    print("8 x 400 Gb/s NICs and NVLink 450 GB/s per GPU (H100_NODE links)")
    print(
        f"{'from -> to':<40} {'relay':>5} {'moved':>9} {'predicted':>10} {'bound':>8} "
        f"{'ratio':>7}  busiest"
    )
    for row in kimi:
        print(
            f"{row['from'] + ' -> ' + row['to']:<40} {'yes' if row['relay'] else 'no':>5} "
            f"{row['bytes_total'] / 1e12:>7.3f}TB "
            f"{row['seconds']:>9.3f}s {row['bound_seconds']:>7.3f}s {row['ratio']:>6.3f}x  "
            f"{row['busiest']} (bound: {row['bound_by']})"
        )
    print(
        f"{'Perplexity, published (reference)':<40} {'':>5} {'':>9} {PERPLEXITY_SECONDS:>9.3f}s "
        f"{'':>8} {'':>7}  measured, RDMA, their hardware"
    )
    print(f"goal: predicted within {GOAL}x the bound")
    wire = wire_rows()
    print()
    print(
        f"{'model':<10} {'layouts':<17} {'ours GB':>9} {'src x dst x max_pair':>22} "
        f"{'M2N GB':>9} {'M2N/ours':>9}"
    )
    for row in wire:
        sizing = f"{row['senders']} x {row['receivers']} x {row['max_pair_bytes'] / 1e9:.2f} GB"
        print(
            f"{row['model']:<10} {row['layouts']:<17} {row['ours_bytes'] / 1e9:>9.2f} "
            f"{sizing:>22} {row['m2n_bytes'] / 1e9:>9.2f} {row['m2n_over_ours']:>8.2f}x"
        )
    write_result(
        args.out,
        {
            "kimi_k2": kimi,
            "perplexity_reference_seconds": PERPLEXITY_SECONDS,
            "goal_ratio": GOAL,
            "wire": wire,
        },
    )


if __name__ == "__main__":
    main()
