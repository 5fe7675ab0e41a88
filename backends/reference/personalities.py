"""The library contracts the reference backend emulates: raw, echo, ultraep, moonep, and the
public baselines alltoall, deepep, hybridep (Megatron-core's token dispatchers)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.loadmodel.planners import PERSONALITIES

# personality name (the one list: harness.loadmodel.planners) -> the library as it spells itself
SPELLING = {"echo": "ECHO", "ultraep": "UltraEP", "moonep": "MoonEP"}
# The public baselines: Megatron-core's dispatchers, no rebalancing (the raw planner). How many
# copies of a token's hidden row a dispatch moves: `alltoall` one per (token, expert) slot
# (MoEAlltoAllTokenDispatcher permutes per expert before its all-to-all); the flex
# dispatcher's DeepEP and HybridEP backends one per (token, destination rank), the receiver
# expanding to its experts (docs/reference-backend.md#public-baselines).
BASELINES = {"alltoall": "Megatron-core alltoall", "deepep": "Megatron-core flex/DeepEP",
             "hybridep": "Megatron-core flex/HybridEP"}
PER_EXPERT, PER_RANK = "per-expert", "per-rank"
DEDUPLICATING = ("deepep", "hybridep")
LIBRARIES = {**{name: SPELLING.get(name, name) for name in PERSONALITIES}, **BASELINES}


@dataclass(frozen=True)
class Personality:
    """What differs between the emulated libraries."""

    name: str
    library: str
    balanced: bool             # moonep: redundant experts, every rank receives exactly N
    rebalances: bool           # echo, ultraep, moonep: a load planner moves slots to replicas
    pad_check: bool            # ultraep: budget must be a multiple of pad_multiple
    fp32_router: bool          # ultraep: router probabilities must be fp32
    overflow_flag: bool        # ultraep: prints [EPCAP_OVERFLOW] when a buffer clips
    planner: str = "raw"       # the load planner (harness.loadmodel.planners): baselines use raw
    copies: str = PER_EXPERT   # rows a dispatch moves: per (token, expert) or per (token, rank)


def personality(name: str) -> Personality:
    """The personality called `name` (raw | echo | ultraep | moonep)."""
    if name not in LIBRARIES:
        raise ValueError(f"unknown personality {name!r}; expected one of {sorted(LIBRARIES)}")
    ultra = name == "ultraep"
    planner = "raw" if name in BASELINES else name
    return Personality(name, LIBRARIES[name], balanced=name == "moonep",
                       rebalances=planner != "raw", pad_check=ultra,
                       fp32_router=ultra, overflow_flag=ultra, planner=planner,
                       copies=PER_RANK if name in DEDUPLICATING else PER_EXPERT)


def planner_of(name: str) -> str:
    """The load planner a personality uses (raw for the public baselines)."""
    return personality(name).planner


def check_budget(p: Personality, budget: int, pad_multiple: int) -> None:
    """UltraEP's allocation assertion, before iteration 0."""
    if p.pad_check and budget % pad_multiple != 0:
        raise AssertionError(f"num_permuted_tokens ({budget}) must be a multiple of "
                             f"pad_multiple ({pad_multiple})")


def check_router_dtype(p: Personality, dtype_name: str) -> None:
    """UltraEP's kernel assertion on the router probabilities' dtype."""
    if p.fp32_router and dtype_name != "torch.float32":
        raise AssertionError(f"ultra_ep.cpp:909: Assertion `topk_weights.scalar_type() == "
                             f"torch::kFloat32` failed: router probabilities must be fp32, "
                             f"got {dtype_name}")


def banner(p: Personality) -> str:
    """The first log line: this is the emulation, not the library."""
    if p.name in BASELINES:
        return (f"[EPCAP_REFERENCE] backend=reference personality={p.name} emulates "
                f"{p.library}'s documented contract (no rebalancing, {p.copies} copies); not "
                f"Megatron-LM")
    if p.name == "raw":
        return ("[EPCAP_REFERENCE] backend=reference personality=raw emulates an EP dispatch "
                "without rebalancing (what DeepEP, HybridEP and NCCL EP hold); not any of "
                "those libraries")
    return (f"[EPCAP_REFERENCE] backend=reference personality={p.name} emulates "
            f"{p.library}'s documented contract; not the {p.library} library")
