"""What the job page shows of one job: links, allowed actions, progress."""
from __future__ import annotations

import dataclasses

from ..domain import estimates, phases, timeutil
from ..domain.model import Job, Parameter
from ..domain.phases import Phase
from ..render.xml import Links


@dataclasses.dataclass(frozen=True)
class ParameterView:
    name: str
    value: str
    url: str | None       # set for by-reference values: a download or the referenced URL
    uploaded: bool


@dataclasses.dataclass
class JobView:
    job: Job
    links: Links

    @property
    def url(self) -> str:
        return self.links.job_url

    @property
    def title(self) -> str:
        return self.job.run_id or self.job.id

    @property
    def active(self) -> bool:
        return self.job.phase in phases.ACTIVE

    @property
    def can_run(self) -> bool:
        return phases.allowed(phases.Event.RUN, self.job.phase)

    @property
    def can_repeat(self) -> bool:
        return self.job.phase in phases.TERMINAL

    @property
    def can_abort(self) -> bool:
        return phases.allowed(phases.Event.ABORT, self.job.phase)

    @property
    def duration_editable(self) -> bool:
        return self.job.phase not in phases.FINISHED | {Phase.EXECUTING}

    @property
    def destruction_editable(self) -> bool:
        return self.job.phase is not Phase.ARCHIVED

    @property
    def parameters_editable(self) -> bool:
        return self.job.phase is Phase.PENDING

    def priority_editable(self, admin: bool) -> bool:
        """An owner sets the priority while PENDING; an administrator until it starts."""
        if admin:
            return self.job.phase in (Phase.PENDING, Phase.QUEUED, Phase.HELD)
        return self.job.phase is Phase.PENDING

    @property
    def shows_progress(self) -> bool:
        return self.job.start_time is not None or self.job.progress is not None

    @property
    def percent(self) -> float:
        if self.job.phase is Phase.COMPLETED:
            return 100.0
        return self.job.progress or 0.0

    @property
    def progress_message(self) -> str:
        """The runner's last progress message, as current while the job is active or
        when it was the last word (reported at 100 %); once the job has ended without
        that, said to be the last report, so "slept 2.9 of 3 s" is never shown as
        where a finished job stands."""
        message, percent = self.job.progress_message or "", self.job.progress
        if not message or self.active or (percent is not None and percent >= 100.0):
            return message
        at = "" if percent is None else f" at {percent:.0f}%"
        return f"(last reported{at}: {message})"

    @property
    def elapsed(self) -> float | None:
        return estimates.elapsed_seconds(self.job, timeutil.now())

    @property
    def remaining(self) -> float | None:
        return estimates.remaining_seconds(self.job, timeutil.now())

    def parameters(self) -> list[ParameterView]:
        return [self._parameter(p) for p in self.job.parameters]

    def _parameter(self, p: Parameter) -> ParameterView:
        if p.is_upload:
            return ParameterView(p.name, p.name, self.links.parameter(p.name), True)
        return ParameterView(p.name, p.value, p.value if p.by_reference else None, False)

    def parameter_values(self) -> dict[str, list[str]]:
        """Current values by upper-case name, to fill the parameter form."""
        out: dict[str, list[str]] = {}
        for p in self.job.parameters:
            if not p.by_reference:
                out.setdefault(p.name.upper(), []).append(p.value)
        return out
