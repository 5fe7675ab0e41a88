"""Capacity-bounded expert-parallel dispatch and combine on torch.distributed.

Placement is contiguous: rank r hosts experts [r*E/ep, (r+1)*E/ep). Each rank orders its
(token, expert) slots by expert, then token, and sends its per-expert counts to every rank
with one all_to_all_single, so every rank knows counts[src, expert] and plans locally.

Rebalancing (echo, ultraep, moonep): every rank computes the same per-expert quotas from the
global counts (harness/loadmodel/planners.py); expert e's slots, in (source rank, token)
order, fill its destinations in ascending rank order. raw keeps every slot at home.

Drop policy (every personality): a receiver fills its `budget` slots in source-rank order,
then expert order, then token order; every later slot is dropped at the source and never
moves.

Copies (the public baselines, docs/reference-backend.md#public-baselines): every personality
but deepep/hybridep sends one row per kept (token, expert) slot; `dispatch_dedup` sends one
row per (token, destination rank) among the kept slots, with each slot's row index and router
weight beside it, and the receiver expands the rows to its experts' slots; its combine sums
each token's local experts on the receiver (fp32, sent back as bf16: one row per (token,
rank)), the source adds the ranks' partial sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .plans import layer_plan, redundant_experts


def _excl_cumsum(t: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(t, 0) - t


def clip_to_budget(incoming: torch.Tensor, budget: int) -> torch.Tensor:
    """Slots kept of incoming[src, expert] by a buffer of `budget` slots (src, then expert order)."""
    flat = incoming.reshape(-1)
    room = (budget - _excl_cumsum(flat)).clamp(min=0)
    return torch.minimum(flat, room).reshape(incoming.shape)


@dataclass
class Plan:
    """One layer's dispatch plan on one rank."""

    order: torch.Tensor        # flat slot indices (token*K + k) in (expert, token) order
    sorted_ids: torch.Tensor   # expert id of each slot in that order
    slot_dest: torch.Tensor    # destination rank of each slot in that order
    send_keep: torch.Tensor    # [ep_dst, E] kept slots this rank sends per (dst, expert)
    recv_keep: torch.Tensor    # [ep_src, E] kept slots this rank receives per (src, expert)
    demand: int                # slots routed to this rank after rebalancing, before clipping
    pre_balance: int = -1      # slots routed to this rank's home experts (before rebalancing)
    redundant: int = 0         # experts of other home ranks this rank receives slots of

    def __post_init__(self) -> None:
        if self.pre_balance < 0:
            self.pre_balance = self.demand


def _sorted_slots(ids: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flat slot order by (expert, token), the sorted expert ids, per-expert counts."""
    flat = ids.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    return order, flat[order], torch.bincount(flat, minlength=experts)


def exchange_counts(cnt: torch.Tensor, ep: int, group=None) -> torch.Tensor:
    """counts[src, expert] of every rank: each sends its per-expert counts to all (all_to_all)."""
    counts = torch.empty(ep * cnt.numel(), dtype=cnt.dtype, device=cnt.device)
    dist.all_to_all_single(counts, cnt.repeat(ep), group=group)
    return counts.reshape(ep, cnt.numel())


def clip_all(counts: torch.Tensor, budget: int) -> torch.Tensor:
    """keep[src, expert] under every home rank's budget (clip_to_budget per destination)."""
    ep, experts = counts.shape
    per_rank = experts // ep
    by_dst = counts.reshape(ep, ep, per_rank).permute(1, 0, 2).reshape(ep, ep * per_rank)
    room = (budget - (torch.cumsum(by_dst, 1) - by_dst)).clamp(min=0)
    keep = torch.minimum(by_dst, room)
    return keep.reshape(ep, ep, per_rank).permute(1, 0, 2).reshape(ep, experts)


def plan_clipped(ids: torch.Tensor, experts: int, ep: int, me: int, budget: int,
                 group=None) -> Plan:
    """echo/ultraep: home placement; each receiver keeps its first `budget` slots."""
    order, sorted_ids, cnt = _sorted_slots(ids, experts)
    return _clipped_plan(order, sorted_ids, exchange_counts(cnt, ep, group), me, budget)


def _clipped_plan(order: torch.Tensor, sorted_ids: torch.Tensor, counts: torch.Tensor,
                  me: int, budget: int) -> Plan:
    """plan_clipped's plan from the exchanged counts[src, expert]."""
    ep, experts = counts.shape
    per_rank = experts // ep
    keep = clip_all(counts, budget)
    arange_e = torch.arange(experts, device=counts.device)
    send_keep = torch.zeros(ep, experts, dtype=counts.dtype, device=counts.device)
    send_keep[arange_e // per_rank, arange_e] = keep[me]
    mine = slice(me * per_rank, (me + 1) * per_rank)
    recv_keep = torch.zeros_like(keep)
    recv_keep[:, mine] = keep[:, mine]
    return Plan(order, sorted_ids, sorted_ids // per_rank, send_keep, recv_keep,
                int(counts[:, mine].sum()))


def slot_dest(sorted_ids: torch.Tensor, counts: torch.Tensor, quotas: torch.Tensor,
              me: int) -> torch.Tensor:
    """Destination rank of each of rank `me`'s slots, given in (expert, token) order: expert
    e's global slots (source rank, token order) fill quotas[e, 0], quotas[e, 1], ... in rank
    order (planners.slot_destinations)."""
    offset = (torch.cumsum(counts, 0) - counts)[me]            # my first slot's place in e
    rank_in_expert = torch.arange(sorted_ids.numel(), device=sorted_ids.device) - \
        _excl_cumsum(counts[me])[sorted_ids]
    pos = offset[sorted_ids] + rank_in_expert
    start = _excl_cumsum(quotas.sum(1))                         # expert e's first position
    flat = torch.searchsorted(torch.cumsum(quotas.reshape(-1), 0), start[sorted_ids] + pos,
                              right=True)
    return flat - sorted_ids * quotas.shape[1]                  # (e, r) -> r


def plan_from_counts(order: torch.Tensor, sorted_ids: torch.Tensor, counts: torch.Tensor,
                     me: int, budget: int, personality: str, options=None) -> Plan:
    """A rebalanced plan from the exchanged counts[src, expert]: the counts-level plan of
    plans.layer_plan (the personality's quotas, identical on every rank, split by source
    rank, each receiver keeping its first `budget` slots in (source rank, expert, token)
    order), and this rank's slots' destinations."""
    lp = layer_plan(counts.cpu().numpy(), budget, personality, options)
    keep = torch.from_numpy(lp.keep).to(counts.device)
    dest = slot_dest(sorted_ids, counts, torch.from_numpy(lp.quotas).to(counts.device), me)
    return Plan(order, sorted_ids, dest, keep[me], keep[:, me, :], int(lp.demand[me]),
                int(lp.pre_balance[me]), redundant_experts(lp, me))


def plan_rebalanced(ids: torch.Tensor, experts: int, ep: int, me: int, budget: int,
                    personality: str, options=None, group=None) -> Plan:
    """echo/ultraep/moonep: global per-expert counts via all_to_all_single, then the plan."""
    order, sorted_ids, cnt = _sorted_slots(ids, experts)
    counts = exchange_counts(cnt, ep, group)
    return plan_from_counts(order, sorted_ids, counts, me, budget, personality, options)


def plan_balanced(ids: torch.Tensor, experts: int, ep: int, me: int, budget: int,
                  group=None) -> Plan:
    """moonep: replicas for exact-N balance (plan_rebalanced with the moonep planner)."""
    return plan_rebalanced(ids, experts, ep, me, budget, "moonep", group=group)


def kept_send_slots(plan: Plan, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat slot indices kept and sent, in (dst, expert, token) order, and the kept mask."""
    key = plan.slot_dest * experts + plan.sorted_ids
    if key.numel() < 2 or bool((key[1:] >= key[:-1]).all()):
        if int(plan.send_keep.sum()) == key.numel():               # sorted and nothing dropped
            return plan.order, torch.ones(key.numel(), dtype=torch.bool, device=key.device)
        by_key = torch.arange(key.numel(), device=key.device)      # home placement: sorted
    else:
        by_key = torch.sort(key, stable=True).indices
    key_sorted = key[by_key]
    group_size = torch.bincount(key_sorted, minlength=plan.send_keep.numel())
    rank_in_group = torch.arange(key.numel(), device=key.device) - \
        _excl_cumsum(group_size)[key_sorted]
    kept = rank_in_group < plan.send_keep.reshape(-1)[key_sorted]
    slots = plan.order[by_key][kept]
    mask = torch.zeros(plan.order.numel(), dtype=torch.bool, device=key.device)
    mask[slots] = True
    return slots, mask


@dataclass
class Dispatched:
    """What dispatch leaves behind for the expert transform and the combine."""

    recv: torch.Tensor         # [received slots, hidden] bf16, (src, expert, token) order
    recv_expert: torch.Tensor  # expert id of each received row
    send_slots: torch.Tensor   # flat slot indices sent, in send order
    kept_mask: torch.Tensor    # [S*K] slot kept (not dropped)
    send_split: list[int]
    recv_split: list[int]
    back: torch.Tensor         # combine's buffer for the returned rows (>= sum(send_split))
    dedup: Dedup | None = None  # deepep/hybridep: the (token, rank) rows actually moved


@dataclass
class Dedup:
    """The rows a deduplicating dispatch moved: one per (token, destination rank)."""

    tokens: torch.Tensor       # source token of each sent row, in (dst, token) order
    send_split: list[int]      # rows sent per destination rank
    recv_split: list[int]      # rows received per source rank
    recv_row: torch.Tensor     # received row (global index) of each received slot
    recv_weight: torch.Tensor  # router weight (fp32) of each received slot


@dataclass
class Buffers:
    """Dispatch/combine buffers allocated once per run, like the libraries' fixed buffers."""

    send: torch.Tensor         # [S*K, hidden]: gathered rows to send
    recv: torch.Tensor         # [receive slots, hidden]: the receive buffer
    back: torch.Tensor         # [S*K, hidden]: combine's returned rows

    @classmethod
    def allocate(cls, x: torch.Tensor, topk: int, recv_slots: int) -> Buffers:
        rows, hidden = x.shape[0] * topk, x.shape[1]
        return cls(x.new_empty(rows, hidden), x.new_empty(recv_slots, hidden),
                   x.new_empty(rows, hidden))


def dispatch(x: torch.Tensor, topk: int, plan: Plan, experts: int, group=None,
             bufs: Buffers | None = None) -> Dispatched:
    """Move the kept slots' hidden states to their destination ranks (all_to_all_single)."""
    return _move(x, topk, plan, experts, group, bufs, packed=False)


def dispatch_clipped(x: torch.Tensor, ids: torch.Tensor, topk: int, experts: int, ep: int,
                     me: int, budget: int, group=None,
                     bufs: Buffers | None = None) -> tuple[Plan, Dispatched]:
    """plan_clipped + dispatch, with the count exchange in flight while the rows are packed.

    Home placement sends in (expert, token) order whatever the counts, so every slot's row is
    gathered in that order while the counts travel; when the budget drops any of this rank's
    slots the kept rows are gathered again. Same plan, rows and order as
    dispatch(x, topk, plan_clipped(...)) (tests/unit/test_reference_dispatch.py checks it).
    """
    flat = ids.reshape(-1)
    cnt = torch.bincount(flat, minlength=experts)
    counts = torch.empty(ep * experts, dtype=cnt.dtype, device=cnt.device)
    work = dist.all_to_all_single(counts, cnt.repeat(ep), group=group, async_op=True)
    order = torch.sort(flat, stable=True).indices
    send = bufs.send if bufs is not None else x.new_empty(flat.numel(), x.shape[1])
    torch.index_select(x, 0, torch.div(order, topk, rounding_mode="floor"),
                       out=send[:flat.numel()])
    work.wait()
    plan = _clipped_plan(order, flat[order], counts.reshape(ep, experts), me, budget)
    if bufs is None:
        n_recv = int(plan.recv_keep.sum())
        bufs = Buffers(send, x.new_empty(n_recv, x.shape[1]), x.new_empty(send.shape))
    return plan, _move(x, topk, plan, experts, group, bufs, packed=True)


def dispatch_dedup(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, topk: int,
                   experts: int, ep: int, me: int, budget: int, group=None,
                   bufs: Buffers | None = None) -> tuple[Plan, Dispatched]:
    """plan_clipped, then one row per (token, destination rank) of the kept slots: the
    DeepEP/HybridEP contract. Same plan, kept slots and received slots as dispatch_clipped."""
    plan = plan_clipped(ids, experts, ep, me, budget, group)
    slots, mask = kept_send_slots(plan, experts)
    send_split = plan.send_keep.sum(1).tolist()
    recv_split = plan.recv_keep.sum(1).tolist()
    dev = x.device
    tokens_n = x.shape[0]
    dst = torch.repeat_interleave(torch.arange(ep, device=dev),
                                  torch.tensor(send_split, device=dev))
    key = dst * tokens_n + torch.div(slots, topk, rounding_mode="floor")
    uniq, inverse = torch.unique(key, sorted=True, return_inverse=True)
    u_send = torch.bincount(torch.div(uniq, tokens_n, rounding_mode="floor"),
                            minlength=ep).tolist()
    local_row = inverse - _excl_cumsum(torch.tensor(u_send, device=dev))[dst]
    u_recv_t = torch.empty(ep, dtype=torch.int64, device=dev)
    dist.all_to_all_single(u_recv_t, torch.tensor(u_send, dtype=torch.int64, device=dev),
                           group=group)
    u_recv = u_recv_t.tolist()
    tokens = uniq % tokens_n
    rows = torch.index_select(x, 0, tokens)
    recv_rows = x.new_empty(sum(u_recv), x.shape[1])
    dist.all_to_all_single(recv_rows, rows, u_recv, u_send, group=group)
    n_recv = sum(recv_split)
    meta = torch.empty(n_recv, dtype=torch.int64, device=dev)
    dist.all_to_all_single(meta, local_row, recv_split, send_split, group=group)
    w_send = weights.reshape(-1).float().index_select(0, slots)
    w_recv = torch.empty(n_recv, dtype=torch.float32, device=dev)
    dist.all_to_all_single(w_recv, w_send, recv_split, send_split, group=group)
    src = torch.repeat_interleave(torch.arange(ep, device=dev),
                                  torch.tensor(recv_split, device=dev))
    recv_row = meta + _excl_cumsum(torch.tensor(u_recv, device=dev))[src]
    if bufs is not None and n_recv > bufs.recv.shape[0]:
        raise AssertionError(f"{n_recv} slots do not fit the {bufs.recv.shape[0]}-slot buffer")
    recv = bufs.recv[:n_recv] if bufs is not None else x.new_empty(n_recv, x.shape[1])
    torch.index_select(recv_rows, 0, recv_row, out=recv)
    exp_ids = torch.arange(experts, device=dev).repeat(ep)
    recv_expert = torch.repeat_interleave(exp_ids, plan.recv_keep.reshape(-1))
    back = x.new_empty(tokens.numel(), x.shape[1])
    return plan, Dispatched(recv, recv_expert, slots, mask, send_split, recv_split, back,
                            Dedup(tokens, u_send, u_recv, recv_row, w_recv))


def _move(x: torch.Tensor, topk: int, plan: Plan, experts: int, group, bufs: Buffers | None,
          packed: bool) -> Dispatched:
    """Gather the kept rows (unless `packed`: bufs.send holds every slot of a home plan in
    plan.order and none is dropped) and exchange them with one all_to_all_single."""
    slots, mask = kept_send_slots(plan, experts)
    send_split = plan.send_keep.sum(1).tolist()
    recv_split = plan.recv_keep.sum(1).tolist()
    n_send, n_recv = sum(send_split), sum(recv_split)
    if bufs is None:
        bufs = Buffers(x.new_empty(n_send, x.shape[1]), x.new_empty(n_recv, x.shape[1]),
                       x.new_empty(n_send, x.shape[1]))
    if n_recv > bufs.recv.shape[0]:
        raise AssertionError(f"{n_recv} slots do not fit the {bufs.recv.shape[0]}-slot buffer")
    send = bufs.send[:n_send]
    if not (packed and n_send == plan.order.numel()):
        torch.index_select(x, 0, torch.div(slots, topk, rounding_mode="floor"), out=send)
    recv = bufs.recv[:n_recv]
    dist.all_to_all_single(recv, send, recv_split, send_split, group=group)
    ep = plan.recv_keep.shape[0]
    exp_ids = torch.arange(experts, device=x.device).repeat(ep)
    recv_expert = torch.repeat_interleave(exp_ids, plan.recv_keep.reshape(-1))
    return Dispatched(recv, recv_expert, slots, mask, send_split, recv_split, bufs.back)


def expert_scale(experts: int, device=None) -> torch.Tensor:
    """The per-expert transform: expert e multiplies its rows by (e + 1) / E."""
    return (torch.arange(experts, device=device, dtype=torch.float32) + 1.0) / experts


def expert_transform(d: Dispatched, experts: int) -> torch.Tensor:
    """Apply each received row's expert (a scale) in fp32, back to the hidden dtype."""
    scale = expert_scale(experts, d.recv.device)[d.recv_expert]
    return (d.recv.float() * scale.unsqueeze(1)).to(d.recv.dtype)


def combine(y: torch.Tensor, d: Dispatched, weights: torch.Tensor, tokens: int,
            group=None) -> torch.Tensor:
    """Return expert outputs to their sources and sum them with the router weights (fp32)."""
    if d.dedup is not None:
        return _combine_dedup(y, d.dedup, d.back, tokens, group)
    back = d.back[:sum(d.send_split)]
    dist.all_to_all_single(back, y, d.send_split, d.recv_split, group=group)
    w = weights.reshape(-1).float().index_select(0, d.send_slots)
    out = torch.zeros(tokens, y.shape[1], dtype=torch.float32, device=y.device)
    topk = weights.shape[1]
    out.index_add_(0, d.send_slots // topk, back.float() * w.unsqueeze(1))
    return out


def _combine_dedup(y: torch.Tensor, dd: Dedup, back: torch.Tensor, tokens: int,
                   group=None) -> torch.Tensor:
    """deepep/hybridep: the receiver sums each (token, source) row's experts with their router
    weights (fp32), returns one bf16 row per (token, rank), the source adds them up."""
    partial = torch.zeros(sum(dd.recv_split), y.shape[1], dtype=torch.float32, device=y.device)
    partial.index_add_(0, dd.recv_row, y.float() * dd.recv_weight.unsqueeze(1))
    back = back[:sum(dd.send_split)]
    dist.all_to_all_single(back, partial.to(y.dtype), dd.send_split, dd.recv_split, group=group)
    out = torch.zeros(tokens, y.shape[1], dtype=torch.float32, device=y.device)
    out.index_add_(0, dd.tokens, back.float())
    return out


def reference_output(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                     kept_mask: torch.Tensor, experts: int) -> torch.Tensor:
    """What combine must return, computed locally: sum over kept slots of w * expert(x)."""
    scale = expert_scale(experts, x.device)
    kept = kept_mask.reshape(ids.shape)
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    xf = x.float()
    for k in range(ids.shape[1]):
        yk = (xf * scale[ids[:, k]].unsqueeze(1)).to(x.dtype).float()
        wk = torch.where(kept[:, k], weights[:, k].float(), torch.zeros_like(weights[:, k].float()))
        out += yk * wk.unsqueeze(1)
    return out


# A deduplicating combine rounds each rank's partial sum to bf16 (8 significant bits) before
# the source adds them: the check allows that rounding (2^-9 of each partial, over up to ep
# partials of magnitude up to ~8: atol 2^-5, rtol 2^-7); a misrouted row errs by O(1).
EXACT, BF16_PARTIALS = (1e-5, 1e-5), (2.0 ** -7, 2.0 ** -5)


def check_combine(out: torch.Tensor, ref: torch.Tensor, where: str,
                  tol: tuple[float, float] = EXACT) -> None:
    """Assert combine == reference for every token (a mismatch is a bug of the emulation);
    `tol` = (rtol, atol)."""
    if not torch.allclose(out, ref, rtol=tol[0], atol=tol[1]):
        bad = (out - ref).abs().amax(dim=1)
        tok = int(torch.argmax(bad))
        raise AssertionError(f"combine mismatch at {where}: token {tok} max |diff| "
                             f"{float(bad[tok]):.3g} ({int((bad > tol[1]).sum())} tokens differ)")
