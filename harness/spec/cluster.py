"""What a spec becomes on a real VIME cluster: the node shape, and rungs VIME cannot express.

Both feed resolve(): the GPUs per node of a stage's hardware become VIME's `--num-gpus-per-node`
(its default, 8, is wrong for GB200's 4 and matters for non-colocate placement), and a rung's
`on-vime` caveat either stops it on VIME with its reason or marks the run as the rung's nearest
honest equivalent. Never silently something else.
"""

from __future__ import annotations

from harness.spec import backends
from harness.spec.errors import SpecError
from harness.spec.schema import Rung


def stage_hardware(knobs, stage_name: str) -> tuple[str, int]:
    """(hardware name, GPUs per node) of a stage. `hardware: B200/GB200` lists candidates: the one
    whose node size times the stage's node count gives the stage's GPU count is the one meant."""
    from harness.spec.load import _relative

    stage = knobs.stages[stage_name]
    where = f"{_relative(knobs.root / 'stages.yaml')}: stages.{stage_name}.hardware"
    known = knobs.hardware
    candidates = [name.strip() for name in stage.hardware.split("/")]
    unknown = [name for name in candidates if name not in known]
    if unknown:
        raise SpecError(f"{where}: expected hardware named under `hardware:` in stages.yaml ({', '.join(known) or 'none'}), got {unknown[0]!r}")
    fitting = [name for name in candidates if known[name].gpus_per_node * stage.nodes == stage.gpus]
    if len(fitting) != 1:
        sizes = ", ".join(f"{name}: {known[name].gpus_per_node}/node" for name in candidates)
        raise SpecError(
            f"{where}: expected exactly one of {stage.hardware!r} to give {stage.gpus} GPUs on {stage.nodes} node(s) ({sizes}), got {len(fitting)}"
        )
    return fitting[0], known[fitting[0]].gpus_per_node


def site_stage_hardware(knobs, stage_name: str):
    """(name, Hardware) of a stage on this cluster: the site's node type for the stage when it
    names one, else the stage's own (stage_hardware)."""
    site = knobs.site
    shape = site.stages.get(stage_name) if site is not None else None
    if shape is not None and shape.hardware is not None:
        return shape.hardware, knobs.hardware[shape.hardware]
    name, _ = stage_hardware(knobs, stage_name)
    return name, knobs.hardware[name]


def vime_line(knobs) -> str:
    return knobs.base.vime_line


def caveat_for(knobs, rung: Rung, backend: str):
    """The rung's on-vime caveat if it applies to this backend and VIME line, else None."""
    caveat = rung.on_vime
    if not backends.backend(backend).on_cluster or caveat is None or vime_line(knobs) not in caveat.lines:
        return None
    return caveat


def skip_reason(knobs, rung: Rung, backend: str) -> str | None:
    """Why this rung is not run on `backend`, as one line naming its file, or None if it runs."""
    from harness.spec.load import _relative

    where = _relative(knobs.root / "ladder" / f"{rung.id}.yaml")
    if not backends.backend(backend).named_in(rung.backends):
        return f"{where}: backends: runs on {' or '.join(rung.backends)} only, not {backend}"
    caveat = caveat_for(knobs, rung, backend)
    if caveat is not None and caveat.action == "skip":
        return f"{where}: on-vime: not run on VIME ({vime_line(knobs)}): {caveat.reason.strip()}"
    from harness.spec.models import dense_model_skip

    return dense_model_skip(knobs, rung, backend)  # an MoE rung on a dense model


def equivalence_note(knobs, rung: Rung, backend: str) -> str | None:
    """What the rendered run stands for when it is the rung's nearest equivalent on VIME."""
    from harness.spec.load import _relative

    caveat = caveat_for(knobs, rung, backend)
    if caveat is None or caveat.action != "equivalent":
        return None
    return f"{_relative(knobs.root / 'ladder' / f'{rung.id}.yaml')}: on-vime: rendered as its nearest VIME equivalent: {caveat.reason.strip()}"
