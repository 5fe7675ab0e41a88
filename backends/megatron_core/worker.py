"""One EP rank of the `megatron-core` backend: megatron-core's own TopKRouter and
MoEAlltoAllTokenDispatcher on torch.distributed (gloo on CPU with backends.megatron_core.shims,
NCCL on GPU), fed the reference backend's routing (seeded ids or a trace) through megatron's
RouterReplay, telemetry from megatron's own received counts.

`python -m backends.megatron_core.worker <reference worker flags>`: one rank under a launcher
(RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), or, with --ranks, all local ranks (forked after one
import on CPU, fresh interpreters with a GPU). The per-rank budget is applied as the reference
applies it: a rank keeps min(demand, budget) slots, and a row is saturated at the budget.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings

from backends.ranks import exec_ranks, fork_ranks, wants_fork, worker_main
from backends.reference.options import parse_args
from harness.vocab import phase_iterations

IMPL = "megatron-core"


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class MCoreRank:
    """One rank: megatron-core router + dispatcher per MoE layer, rows like the reference."""

    def __init__(self, args, rank: int, device) -> None:
        import torch

        from backends.megatron_core import shims as megatron_core_shims
        self.torch, self.a, self.rank, self.device = torch, args, rank, device
        self.shimmed = megatron_core_shims.apply(device)
        self.tokens = args.seq * args.micro_batch
        self.n = self.tokens * args.topk
        self.budget = int(float(args.capacity) * self.n)
        self.layers = list(range(args.first_dense_layers, args.layers))
        self.ref = None
        self.samples: dict[str, list[list[float]]] = {"dispatch": [], "combine": []}

    def build(self) -> None:
        """TransformerConfig, process groups, one router (with RouterReplay) and dispatcher."""
        import torch.distributed as dist
        from megatron.core.process_groups_config import ProcessGroupCollection
        from megatron.core.transformer.moe.router import TopKRouter
        from megatron.core.transformer.moe.router_replay import RouterReplayAction
        from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher
        from megatron.core.transformer.transformer_config import TransformerConfig

        a, world = self.a, self.a.ep
        cfg = TransformerConfig(
            num_layers=1, hidden_size=a.hidden, num_attention_heads=1,
            num_moe_experts=a.experts, moe_router_topk=a.topk,
            moe_token_dispatcher_type="alltoall", moe_router_load_balancing_type="none",
            moe_aux_loss_coeff=0.0, moe_enable_routing_replay=True,
            expert_model_parallel_size=world, add_bias_linear=False,
            use_cpu_initialization=self.device.type == "cpu")
        # EP over the whole world, every other parallel size 1: megatron-core reads a None
        # group as size 1, rank 0 (megatron/core/utils.py get_pg_size / get_pg_rank).
        pg = ProcessGroupCollection.__new__(ProcessGroupCollection)
        for name in ("tp", "cp", "tp_cp", "tp_dp_cp", "expt_tp"):
            setattr(pg, name, None)
        pg.ep = pg.tp_ep = dist.group.WORLD
        self.router = TopKRouter(cfg, pg_collection=pg).to(self.device)
        self.router.router_replay.set_router_replay_action(RouterReplayAction.REPLAY_FORWARD)
        per = a.experts // world
        self.local_experts = list(range(self.rank * per, (self.rank + 1) * per))
        self.dispatcher = MoEAlltoAllTokenDispatcher(per, self.local_experts, cfg,
                                                     pg_collection=pg)

    def routing(self, it: int, layer: int):
        """The reference's own ids for (iteration, layer, rank): its RankRun.routing (seeded
        routing or trace replay, whatever the reference worker does), never a copy of it."""
        return self.ref.routing(it, layer)[0].to(self.device)

    def layer(self, x, it: int, layer: int, sw, timed: bool) -> tuple[float, float]:
        """Route (replayed), dispatch, scale per expert, combine, check, and log one row."""
        torch, d, a = self.torch, self.dispatcher, self.a
        ids = self.routing(it, layer)
        self.router.router_replay.set_target_indices(ids)
        with torch.no_grad():
            probs, rmap = self.router(x.unsqueeze(1))
            chosen = rmap.nonzero()[:, 1].reshape(self.tokens, a.topk)
            if not torch.equal(chosen.sort(1).values, ids.sort(1).values):
                raise AssertionError(f"router replay chose other experts at iter={it} "
                                     f"layer={layer} rank={self.rank}")
            t0 = sw.start()
            tok, pr = d.dispatch_preprocess(x, rmap, probs)
            tok, pr = d.token_dispatch(tok, pr)
            recv, per_expert, pr = d.dispatch_postprocess(tok, pr)
            h_disp = sw.stop(t0)
            demand = int(sum(int(s) for s in d.output_splits))
            if demand != int(torch.as_tensor(per_expert).sum()) or demand != recv.shape[0]:
                raise AssertionError(f"megatron counts disagree: output_splits {demand}, "
                                     f"tokens_per_expert {per_expert}, rows {recv.shape[0]}")
            scale = (torch.tensor(self.local_experts, dtype=torch.float32) + 1) / a.experts
            rows = torch.repeat_interleave(scale, torch.as_tensor(per_expert).cpu())
            y = recv * rows.to(self.device).unsqueeze(1) * pr.unsqueeze(1)
            t1 = sw.start()
            out = d.combine_postprocess(d.token_combine(d.combine_preprocess(y)))
            h_comb = sw.stop(t1)
        if not a.timed or it < max(a.warmup, 1):
            self.check_combine(x, ids, probs, out, f"iter={it} layer={layer} rank={self.rank}")
        actual = min(demand, self.budget)
        say(f"[MOE_DROP_DEBUG][dispatch] iter={it} layer={layer} rank={self.rank} "
            f"expected_recv={self.n} actual_valid_recv={actual} budget={self.budget} "
            f"megatron_recv={demand} backend_impl={IMPL}")
        return sw.ms(h_disp), sw.ms(h_comb)

    def check_combine(self, x, ids, probs, out, where: str) -> None:
        """Megatron's combine equals sum_k w_k * expert_k(x), computed locally."""
        from backends.reference.dispatch import check_combine, reference_output

        weights = probs.gather(1, ids)
        kept = self.torch.ones(ids.numel(), dtype=self.torch.bool, device=self.device)
        check_combine(out.float(), reference_output(x, ids, weights, kept, self.a.experts), where)

    def run(self) -> int:
        from backends.reference.timing import Stopwatch
        from backends.reference.worker import RankRun

        a, torch = self.a, self.torch
        self.build()
        # The reference rank's setup: its pre-iteration checks, trace reading and the
        # setup_metadata rows (the same for both backends by construction).
        self.ref = RankRun(a, self.rank, self.device)
        self.ref.setup()
        gen = torch.Generator().manual_seed(a.seed * 7919 + self.rank)
        x = torch.randn(self.tokens, a.hidden, generator=gen).to(self.device)
        sw = Stopwatch(self.device)
        total = phase_iterations(a, a.timed)
        for it in range(total):
            timed = a.timed and it >= a.warmup
            if timed and (it - a.warmup) % a.iters == 0:
                self.samples["dispatch"].append([])
                self.samples["combine"].append([])
            for layer in self.layers:
                td, tc = self.layer(x, it, layer, sw, timed)
                if timed:
                    self.samples["dispatch"][-1].append(td)
                    self.samples["combine"][-1].append(tc)
        if a.timed:
            self.emit_timing(sw.timer)
        say(f"[EPCAP_MEGATRON_CORE] done rank={self.rank} iterations={total} "
            f"layers={len(self.layers)} shims={'cpu' if self.shimmed else 'none'}")
        return 0

    def emit_timing(self, timer: str) -> None:
        """Slowest-rank step times; rank 0 prints the [EPCAP_TIMING] object."""
        from backends.reference.timing import step_times, summarize

        steps = {}
        for kind, trials in self.samples.items():
            flat = step_times([x for t in trials for x in t], self.device)
            per = len(trials[0])
            steps[kind] = [flat[i * per:(i + 1) * per] for i in range(len(trials))]
        if self.rank == 0:
            out = summarize(steps["dispatch"], steps["combine"], self.a.iters, self.tokens,
                            self.a.topk, self.a.hidden, 4, timer)
            out.update(backend_impl=IMPL, ranks=self.a.ep, capacity=self.a.capacity,
                       budget_tokens=self.budget, peak_mem_bytes=None)
            say("[EPCAP_TIMING] " + json.dumps(out, separators=(",", ":")))


def one_rank(args, rank: int, world: int, local_rank: int) -> int:
    """Banner, process group (gloo on CPU, NCCL on GPU), the run, teardown."""
    say(f"[EPCAP_MEGATRON_CORE] backend_impl={IMPL} rank={rank} world={world} "
        f"model={args.model} timed={int(args.timed)} capacity={args.capacity} ep={args.ep}")
    if world != args.ep:
        print(f"error: world size {world} differs from --ep {args.ep}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
    import torch
    import torch.distributed as dist

    from backends.reference.worker import announce, init_group, pick_device
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    device = pick_device(args.device, local_rank)
    announce(rank, world, local_rank, device)
    init_group(device, rank, world, args.pg_timeout_s)
    try:
        return MCoreRank(args, rank, device).run()
    except AssertionError as exc:
        traceback.print_exc()
        say(f"[EPCAP_ASSERT] AssertionError: {exc}")
        return 1
    except ValueError as exc:
        if type(exc).__name__ != "TraceError":          # the reference's trace refusal
            raise
        print(f"error: trace {exc}", file=sys.stderr, flush=True)
        return 2
    finally:
        dist.destroy_process_group()


def spawn(argv: list[str], args) -> int:
    """All local ranks (backends/ranks.py): forked after one import on CPU, else one
    interpreter per rank."""
    ranks = args.ranks or args.ep
    if wants_fork(args.device, args.spawn):
        import megatron.core.transformer.moe.token_dispatcher  # noqa: F401  (import once)
        return fork_ranks(ranks, lambda rank, world: one_rank(args, rank, world, rank),
                          args.log_dir)
    return exec_ranks([sys.executable, "-m", "backends.megatron_core.worker", *argv], ranks,
                      args.log_dir)


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, parse_args, one_rank, spawn)


if __name__ == "__main__":
    sys.exit(main())
