"""The physical limit of an EP exchange: each GPU kind's NVLink bandwidth, declared with sources.

A rank's dispatch (or combine) moves its remote bytes through its own NVLink ports, so no
honest measurement moves more than `links x GB/s per link per direction` bytes per second
out of (or into) one GPU. The table holds, per GPU kind: the vendor's figure (the limit
the audit enforces) and, beside it, NCCL's own model figure for the same links (the
per-link bandwidth NCCL's topology search assumes, `ncclTopoNVLinkBw`), which is what NCCL
plans for and a realistic ceiling. A GPU not in the table (CPU emulation, another kind)
has no limit: the fraction is empty and the reason is said, never a guessed figure.

Sources (docs/timing-verdicts.md#the-physical-limit):
- NVLink 5 (Blackwell, B200): 18 links of 100 GB/s bidirectional = 1.8 TB/s per GPU, 900 GB/s
  per direction; https://www.nvidia.com/en-us/data-center/nvlink/ ("A single NVIDIA
  Blackwell Tensor Core GPU supports up to 18 NVLink 100 gigabyte-per-second (GB/s)
  connections for a total bandwidth of 1.8 terabytes per second").
- NVLink 4 (Hopper, H100 SXM, H200 SXM; PCIe and NVL parts are refused, their bridges
  differ): 18 links, 900 GB/s bidirectional per GPU, 450 GB/s
  per direction; https://www.nvidia.com/en-us/data-center/h100/ and
  https://www.nvidia.com/en-us/data-center/h200/ ("NVIDIA NVLink: 900GB/s").
- NCCL's model: NVIDIA/nccl `src/graph/topo.h` at commit
  069a3d4f95ca488dc63ba7ae659a2db77942a62e, `SM90_NVLINK_BW 20.6` and `SM100_NVLINK_BW 40.1`
  (GB/s per link, chosen by compute capability in `ncclTopoNVLinkBw`).
"""

from __future__ import annotations

from dataclasses import dataclass

NVLINK_PAGE = "https://www.nvidia.com/en-us/data-center/nvlink/"
H100_PAGE = "https://www.nvidia.com/en-us/data-center/h100/"
H200_PAGE = "https://www.nvidia.com/en-us/data-center/h200/"
NCCL_SOURCE = ("NVIDIA/nccl src/graph/topo.h @ 069a3d4f95ca488dc63ba7ae659a2db77942a62e "
               "(ncclTopoNVLinkBw)")


@dataclass(frozen=True)
class Link:
    """One GPU kind's NVLink: links, vendor GB/s per link per direction, NCCL's model figure."""

    kind: str                  # what a device name must contain (upper case), e.g. "B200"
    generation: str
    links: int
    gbps_per_link: float       # vendor figure, GB/s (1e9 bytes/s) per link per direction
    nccl_gbps_per_link: float  # NCCL's per-link model figure (GB/s)
    source: str

    @property
    def gbps(self) -> float:
        """The limit: GB/s per direction out of (or into) one GPU."""
        return self.links * self.gbps_per_link

    @property
    def nccl_gbps(self) -> float:
        """NCCL's model of the same links (GB/s per direction)."""
        return self.links * self.nccl_gbps_per_link


LINKS: tuple[Link, ...] = (
    Link("B200", "NVLink 5", 18, 50.0, 40.1, NVLINK_PAGE),
    Link("B300", "NVLink 5", 18, 50.0, 40.1, NVLINK_PAGE),
    Link("H200", "NVLink 4", 18, 25.0, 20.6, H200_PAGE),
    Link("H100", "NVLink 4", 18, 25.0, 20.6, H100_PAGE),
)

NO_GPU = ("no-gpu", "cpu")


def link_of(device: str | None) -> tuple[Link | None, str]:
    """(the declared link of a device name, why none): `NVIDIA B200` -> B200's NVLink 5."""
    if device is None:
        return None, "the run named no device (no device_name in its timing object)"
    name = device.strip()
    if name.lower() in NO_GPU:
        return None, "no GPU (CPU emulation): no link limit applies"
    upper = name.upper()
    if "PCIE" in upper or upper.endswith(" NVL"):
        return None, (f"GPU {name!r} is a PCIe/NVL part (NVLink bridge, not the SXM figures "
                      "the table declares)")
    found = {link.kind for link in LINKS if link.kind in upper}
    if len(found) == 1:
        return next(link for link in LINKS if link.kind in found), ""
    if len(found) > 1:
        return None, f"device {name!r} names several GPU kinds {sorted(found)}"
    if not name:
        return None, "the device name is empty"
    return None, f"GPU {name!r} is not in the declared link table (harness/timing/links.py)"


def achieved_gbps(bytes_moved: float | None, ms: float | None) -> float | None:
    """Bytes per second in GB/s (1e9), empty when either figure is missing or ms is 0."""
    if bytes_moved is None or ms is None or ms <= 0:
        return None
    return bytes_moved / (ms * 1e-3) / 1e9


BYTE_KEYS = ("dispatch_bytes_per_rank", "dispatch_local_bytes_per_rank", "combine_bytes_per_rank")


def physical(figures: dict, device: str | None) -> dict:
    """timing.tsv's physical columns from an arm's aggregated figures (its bytes per rank and
    medians) and the device it ran on: achieved GB/s per phase, the declared link limit and
    NCCL's model figure, the fraction of the limit; empty with `link_note` saying why."""
    out: dict = {"gpu": device or None}
    for phase in ("dispatch", "combine"):
        out[f"{phase}_gbps"] = achieved_gbps(figures.get(f"{phase}_bytes_per_rank"),
                                             figures.get(f"{phase}_ms_median"))
    link, why = link_of(device)
    if link is None:
        out.update(link_gbps=None, link_nccl_gbps=None, dispatch_link_fraction=None,
                   combine_link_fraction=None, link_note=why)
        return out
    out.update(link_gbps=link.gbps, link_nccl_gbps=link.nccl_gbps,
               link_note=f"{link.kind} {link.generation}: {link.links} x "
                         f"{link.gbps_per_link:g} GB/s per direction ({link.source}); NCCL "
                         f"models {link.links} x {link.nccl_gbps_per_link:g} ({NCCL_SOURCE})")
    for phase in ("dispatch", "combine"):
        gbps = out[f"{phase}_gbps"]
        out[f"{phase}_link_fraction"] = None if gbps is None else gbps / link.gbps
    if out["dispatch_gbps"] is None and out["combine_gbps"] is None:
        out["link_note"] = "no bytes moved stated by the run: " + out["link_note"]
    return out
