"""The CUDA shims that let megatron-core's router and all-to-all dispatcher run on CPU (gloo).

Applied only when the rank's device is the CPU (`apply(device)`), never with a GPU: there
megatron-core runs untouched on NCCL. Each shim names the megatron-core 0.16.1 code it covers:

- streams and events: MoEAlltoAllTokenDispatcher keeps a class-level `torch.cuda.Stream()`
  for its device-to-host copies and records/synchronises a `torch.cuda` event at its sync
  point (token_dispatcher.py, `_maybe_dtoh_and_synchronize`); on CPU both are no-ops.
- current device: routers allocate buffers on `torch.cuda.current_device()` (router.py).
- the split-size move to CPU: `maybe_move_tensor_to_cpu(..., as_numpy=True)` turns the
  all-to-all split sizes into numpy arrays only for CUDA tensors (moe_utils.py); gloo's
  all_to_all_single needs them as a sequence, so CPU tensors get the same conversion.
- `te_general_gemm`: the router's gating function tests this Transformer Engine symbol,
  which moe_utils.py binds only when Transformer Engine is installed.
"""

from __future__ import annotations

import torch

_APPLIED = False


class _NoStream:
    """A torch.cuda.Stream stand-in: every operation is a no-op (CPU runs in order)."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def wait_stream(self, *args) -> None:
        pass

    def record_event(self, *args, **kwargs) -> _NoEvent:
        return _NoEvent()

    def synchronize(self) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NoStream)

    def __hash__(self) -> int:
        return 0

    def __enter__(self) -> _NoStream:
        return self

    def __exit__(self, *exc) -> bool:
        return False


class _NoEvent:
    """A torch.cuda.Event stand-in."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def record(self, *args, **kwargs) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, *args) -> None:
        pass


def apply(device: torch.device) -> bool:
    """Install the shims when `device` is the CPU (idempotent); True when they are active."""
    global _APPLIED
    if device.type != "cpu":
        return False
    if _APPLIED:
        return True
    torch.cuda.Stream = _NoStream
    torch.cuda.Event = _NoEvent
    torch.cuda.current_stream = lambda *a, **k: _NoStream()
    torch.cuda.stream = lambda *a, **k: _NoStream()
    torch.cuda.current_device = lambda: "cpu"
    import megatron.core.transformer.moe.moe_utils as moe_utils
    import megatron.core.transformer.moe.token_dispatcher as token_dispatcher

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    original = token_dispatcher.maybe_move_tensor_to_cpu

    def move_to_cpu(tensor, as_numpy: bool = False, record_stream: bool = False):
        if torch.is_tensor(tensor) and not tensor.is_cuda and as_numpy:
            return tensor.numpy()
        return original(tensor, as_numpy=as_numpy, record_stream=record_stream)

    token_dispatcher.maybe_move_tensor_to_cpu = move_to_cpu
    _APPLIED = True
    return True
