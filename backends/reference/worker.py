"""One EP rank of the reference emulation: route, dispatch, transform, combine, verify, log."""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

from harness.api.backend import rank_line
from harness.loadmodel.memory import estimate_memory_bytes
from harness.loadmodel.trace_io import preload, write_epcap, write_megatron
from harness.timing.traffic import remote_local, row_bytes
from harness.vocab import phase_iterations

from .dispatch import (
    BF16_PARTIALS,
    EXACT,
    Buffers,
    check_combine,
    combine,
    dispatch,
    dispatch_clipped,
    dispatch_dedup,
    expert_transform,
    plan_rebalanced,
    reference_output,
)
from .options import budget_of, memory_of, model_of, model_seed_of, moe_layers, shape_of, tokens_of
from .personalities import (
    PER_RANK,
    Personality,
    check_budget,
    check_router_dtype,
    personality,
)
from .plans import received
from .routing import ROUTER_DTYPES, expert_popularity, route, weights_for_ids
from .timing import Stopwatch, quantile, step_times, summarize


def say(text: str) -> None:
    """One flushed log line on stdout (each rank's stdout is its log)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def pick_device(choice: str, local_rank: int) -> torch.device:
    """cpu, or the local rank's GPU; auto = cuda when available."""
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda":
        idx = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(idx)
        return torch.device("cuda", idx)
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    """The GPU's name as CUDA reports it (the link table's key), or `cpu`."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def announce(rank: int, world: int, local_rank: int, device: torch.device) -> None:
    """This rank's `[EPCAP_RANK]` line: who it is, on which host and device."""
    say(rank_line(rank=rank, world=world, local_rank=local_rank, device=str(device),
                  device_name=device_name(device)))


def init_group(device: torch.device, rank: int, world: int, timeout_s: int) -> None:
    """gloo on CPU, NCCL on CUDA; rendezvous from MASTER_ADDR/MASTER_PORT."""
    if device.type == "cpu" and "GLOO_SOCKET_IFNAME" not in os.environ and \
            os.environ.get("MASTER_ADDR") in ("127.0.0.1", "localhost"):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s), **kwargs)


class RankRun:
    """State of one rank's run; `run()` does the iterations and prints the telemetry."""

    def __init__(self, args: argparse.Namespace, rank: int, device: torch.device) -> None:
        self.a, self.rank, self.device = args, rank, device
        self.p: Personality = personality(args.personality)
        self.tokens = tokens_of(args)
        self.n = self.tokens * args.topk
        self.budget = budget_of(args)
        self.layers = moe_layers(args)
        self.sw = Stopwatch(device)
        self.trace = None
        self.bufs: Buffers | None = None
        self.recorded: list[tuple[int, int, int, list, list]] = []
        self.samples: dict[str, list[list[float]]] = {"dispatch": [], "combine": []}
        self.moved: dict[str, list[float]] = {"remote": [], "local": []}   # bytes per sample
        self.model_seed = model_seed_of(args)

    def total_iters(self) -> int:
        return phase_iterations(self.a, self.a.timed)     # warmup + iters (x trials if timed)

    def hidden_states(self) -> torch.Tensor:
        """This rank's tokens: seeded N(0,1) bf16 [S, hidden], reused for every layer."""
        gen = torch.Generator().manual_seed(self.a.seed * 7919 + self.rank)
        x = torch.randn(self.tokens, self.a.hidden, generator=gen)
        return x.to(device=self.device, dtype=torch.bfloat16)

    def routing(self, it: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, weights) for this rank at (iteration, layer): trace replay or seeded routing."""
        a = self.a
        if self.trace is not None:
            ids, w = self.trace.lookup(it, layer, self.rank)
            ids = torch.from_numpy(ids)
            if w is None:
                pop = expert_popularity(self.model_seed, a.model, layer, a.experts,
                                        a.routing_sigma, a.routing, it)
                w = weights_for_ids(ids, pop, a.router_dtype)
            else:
                w = torch.from_numpy(w).to(ROUTER_DTYPES[a.router_dtype])
        else:
            r = route(a.seed, a.model, layer, it, self.rank, self.tokens, a.experts, a.topk,
                      a.routing_sigma, a.router_dtype, a.routing,
                      popularity_seed=self.model_seed)
            ids, w = r.ids, r.weights
        if a.record_trace:
            self.recorded.append((it, layer, self.rank, ids.tolist(), w.float().tolist()))
        return ids.to(self.device), w.to(self.device)

    def setup(self) -> None:
        """Checks before iteration 0 and the setup_metadata rows."""
        check_budget(self.p, self.budget, self.a.pad_multiple)
        if self.a.trace:
            self.trace = preload(self.a.trace, self.a.experts, self.a.topk, self.tokens,
                                 self.a.ep, self.layers)
        exact = ",".join([str(self.n)] * self.a.ep)
        for layer in self.layers:
            say(f"[MOE_DROP_DEBUG][setup_metadata] iter=0 layer={layer} rank={self.rank} "
                f"budget={self.budget} exact_recv_per_rank=[{exact}]")

    def step(self, x: torch.Tensor, it: int, layer: int, timed: bool) -> tuple[float, float]:
        """One layer's dispatch + transform + combine (+ verification); returns times (ms)."""
        a = self.a
        ids, w = self.routing(it, layer)
        check_router_dtype(self.p, str(w.dtype))
        if timed:
            dist.barrier()
        t0 = self.sw.start()
        for _ in range(a.extra_dispatch_passes if timed else 0):
            self.dispatch(x, ids, w)
        plan, d = self.dispatch(x, ids, w)
        h_disp = self.sw.stop(t0)
        y = expert_transform(d, a.experts)
        if timed:
            dist.barrier()
        t1 = self.sw.start()
        out = combine(y, d, w, self.tokens)
        h_comb = self.sw.stop(t1)
        if not a.timed or it < max(a.warmup, 1):
            ref = reference_output(x, ids, w, d.kept_mask, a.experts)
            check_combine(out, ref, f"iter={it} layer={layer} rank={self.rank}",
                          BF16_PARTIALS if d.dedup is not None else EXACT)
        if a.combine_digest:
            digest = hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()[:32]
            say(f"[EPCAP_COMBINE] iter={it} layer={layer} rank={self.rank} sha256={digest}")
        self.report(it, layer, plan, d)
        if timed:
            self.count_bytes(d)
        return self.sw.ms(h_disp), self.sw.ms(h_comb)

    def dispatch(self, x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor):
        """The personality's dispatch: rebalanced, one row per slot, or one per (token, rank)."""
        a = self.a
        if self.p.rebalances:
            plan = plan_rebalanced(ids, a.experts, a.ep, self.rank, self.budget,
                                   a.personality, a.planner_options)
            return plan, dispatch(x, a.topk, plan, a.experts, bufs=self.bufs)
        if self.p.copies == PER_RANK:
            return dispatch_dedup(x, ids, w, a.topk, a.experts, a.ep, self.rank, self.budget,
                                  bufs=self.bufs)
        return dispatch_clipped(x, ids, a.topk, a.experts, a.ep, self.rank, self.budget,
                                bufs=self.bufs)

    def count_bytes(self, d) -> None:
        """The rows this dispatch moved (what the exchange carried, not a formula): remote in
        the busier direction, and local, in bytes (bf16 rows)."""
        sent, got = (d.dedup.send_split, d.dedup.recv_split) if d.dedup is not None else \
            (d.send_split, d.recv_split)
        remote, local = remote_local(sent, got, self.rank)
        size = row_bytes(self.a.hidden, "bf16")
        self.moved["remote"].append(float(remote * size))
        self.moved["local"].append(float(local * size))

    def report(self, it: int, layer: int, plan, d) -> None:
        """The dispatch row (and UltraEP's overflow flag); guards the buffer invariants."""
        actual = int(d.recv.shape[0])
        want = received(plan.demand, self.budget)
        if actual != want:
            raise AssertionError(f"received {actual} slots, expected min(demand "
                                 f"{plan.demand}, budget {self.budget}) = {want}")
        extra = f" pre_balance_recv={plan.pre_balance}"
        if self.p.rebalances:
            extra += f" redundant_experts={plan.redundant}"
        say(f"[MOE_DROP_DEBUG][dispatch] iter={it} layer={layer} rank={self.rank} "
            f"expected_recv={self.n} actual_valid_recv={actual} budget={self.budget}{extra}")
        if self.p.overflow_flag and plan.demand > self.budget:
            say(f"[EPCAP_OVERFLOW] iter={it} layer={layer} rank={self.rank} "
                f"budget={self.budget} dropped_slots={plan.demand - self.budget}")

    def run(self) -> int:
        """Setup, all iterations over all MoE layers, timing and trace; 0 when clean."""
        a = self.a
        self.setup()
        x = self.hidden_states()
        slots = min(self.n if self.p.balanced else a.ep * self.n, self.budget)
        self.bufs = Buffers.allocate(x, a.topk, slots)
        for it in range(self.total_iters()):
            timed = a.timed and it >= a.warmup
            if timed and (it - a.warmup) % a.iters == 0:
                self.samples["dispatch"].append([])
                self.samples["combine"].append([])
            for layer in self.layers:
                td, tc = self.step(x, it, layer, timed)
                if timed:
                    self.samples["dispatch"][-1].append(td)
                    self.samples["combine"][-1].append(tc)
        if a.timed:
            self.emit_timing()
        if a.record_trace:
            self.save_trace()
        say(f"[EPCAP_REFERENCE] done rank={self.rank} iterations={self.total_iters()} "
            f"layers={len(self.layers)}")
        return 0

    def emit_timing(self) -> None:
        """Slowest-rank steps, per-rank medians, peak memory; rank 0 prints [EPCAP_TIMING]."""
        a = self.a
        steps = {}
        for kind, trials in self.samples.items():
            flat = step_times([x for t in trials for x in t], self.device)
            per = len(trials[0])
            steps[kind] = [flat[i * per:(i + 1) * per] for i in range(len(trials))]
        mine = [x for t in self.samples["dispatch"] for x in t]
        local = torch.tensor([quantile(mine, 0.5), quantile(mine, 0.9)], dtype=torch.float64,
                             device=self.device)
        gathered = [torch.zeros_like(local) for _ in range(a.ep)]
        dist.all_gather(gathered, local)
        peak, source = self.peak_memory()
        remote = step_times(self.moved["remote"], self.device)    # busiest rank per sample
        local = step_times(self.moved["local"], self.device)
        if self.rank != 0:
            return
        out = summarize(steps["dispatch"], steps["combine"], a.iters, self.tokens, a.topk,
                        a.hidden, 2, self.sw.timer)
        out.update(peak_mem_bytes=peak, peak_mem_source=source,
                   personality=a.personality, ranks=a.ep, capacity=a.capacity,
                   budget_tokens=self.budget,
                   rank_dispatch_ms_median=[float(g[0]) for g in gathered],
                   rank_dispatch_ms_p90=[float(g[1]) for g in gathered],
                   dispatch_bytes_per_rank=quantile(remote, 0.5),
                   combine_bytes_per_rank=quantile(remote, 0.5),
                   dispatch_local_bytes_per_rank=quantile(local, 0.5),
                   copies=self.p.copies, device_name=device_name(self.device))
        say("[EPCAP_TIMING] " + json.dumps(out, separators=(",", ":")))

    def peak_memory(self) -> tuple[int, str]:
        """Measured CUDA peak (max over ranks) on GPU, else the memory model's total."""
        if self.device.type == "cuda":
            t = torch.tensor([torch.cuda.max_memory_allocated(self.device)], device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return int(t.item()), "measured"
        est = estimate_memory_bytes(model_of(self.a), shape_of(self.a), self.a.capacity,
                                    self.a.personality, self.a.ep, memory_of(self.a))
        return int(est["total"]), "modelled"

    def save_trace(self) -> None:
        """Megatron layout: each rank writes its own file; epcap: rank 0 gathers and writes."""
        a = self.a
        if a.record_trace_format == "megatron":
            write_megatron(a.record_trace, self.rank, self.recorded)
            return
        parts = [None] * a.ep if self.rank == 0 else None
        dist.gather_object(self.recorded, parts, dst=0)
        if self.rank == 0:
            header = {"experts": a.experts, "topk": a.topk, "tokens": self.tokens, "ep": a.ep,
                      "seq": a.seq, "micro_batch": a.micro_batch,
                      "router_dtype": a.router_dtype, "model": a.model, "hidden": a.hidden,
                      "personality": a.personality,
                      "planner_options": getattr(a, "planner_options", None) or {}}
            write_epcap(a.record_trace, header, [r for part in parts for r in part])


def run_rank(args: argparse.Namespace, rank: int, world: int, local_rank: int) -> int:
    """Join the process group, run, leave."""
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    device = pick_device(args.device, local_rank)
    announce(rank, world, local_rank, device)
    init_group(device, rank, world, args.pg_timeout_s)
    try:
        return RankRun(args, rank, device).run()
    finally:
        sys.stdout.flush()
        dist.destroy_process_group()
