"""HTML forms built from a service's parameter declarations, and what browsers send back.

A browser form sends every input, filled or not, so for browser requests only:
an empty value of a non-string parameter (or of a job-control field) means "not
given", and a boolean's checkbox sends ``true`` after a hidden ``false`` (the last
value wins).  Clients that do not ask for HTML are never affected.
"""
from __future__ import annotations

import dataclasses

from ..domain import queueing, timeutil
from ..domain.errors import BadRequest
from ..domain.model import check_run_id
from ..domain.parameters import ParameterError, ParamSpec
from ..domain.services import Service, collect
from ..usecases.jobs import parse_duration

INPUTS = {"integer": "number", "float": "number", "boolean": "checkbox", "enum": "select",
          "datetime": "datetime-local", "file": "file", "string": "text"}


@dataclasses.dataclass
class Field:
    """One input of a form: the declaration, the value to show and its error."""
    spec: ParamSpec
    values: list[str]
    error: str | None = None

    @property
    def input(self) -> str:
        return INPUTS[self.spec.type]

    @property
    def value(self) -> str:
        """The value to put in the input: the one submitted, else the default."""
        if self.values:
            return self.values[-1]
        return self.spec.default or ""

    @property
    def local_value(self) -> str:
        """``value`` as a datetime-local input wants it (UTC, no zone)."""
        try:
            return timeutil.parse_time(self.value).isoformat(timespec="seconds")
        except ValueError:
            return ""

    @property
    def checked(self) -> bool:
        return self.value.lower() == "true"

    @property
    def step(self) -> str:
        return "1" if self.spec.type == "integer" else "any"

    @property
    def required(self) -> bool:
        """Whether the browser may insist (a file may also be a URL, so never there)."""
        return self.spec.required and not self.spec.is_file


def fields(service: Service, values: dict[str, list[str]] | None = None,
           errors: dict[str, str] | None = None) -> list[Field]:
    """The service's inputs, showing submitted ``values`` (by upper-case name)."""
    values, errors = values or {}, errors or {}
    return [Field(spec, values.get(spec.name.upper(), []), errors.get(spec.name.upper()))
            for spec in service.parameters]


def browser_pairs(service: Service, pairs) -> list[tuple[str, str]]:
    """A browser form's (name, value) pairs as a UWS client would have sent them."""
    kept: list[tuple[str, str]] = []
    for name, value in pairs:
        spec = _spec(service, name)
        if value == "" and (spec is None or spec.type != "string"):
            continue
        if spec is not None and spec.type == "boolean":
            kept = [(n, v) for n, v in kept if n.upper() != name.upper()]
        kept.append((name, value))
    return kept


def browser_control(control: dict[str, list[str]]) -> dict[str, list[str]]:
    """Job-control values without the empty fields a form always sends."""
    return {name: [v for v in values if v != ""] for name, values in control.items()
            if any(v != "" for v in values)}


def _spec(service: Service, name: str) -> ParamSpec | None:
    try:
        return service.spec(name)
    except ParameterError:
        return None


def submitted(pairs, control: dict[str, list[str]]) -> dict[str, list[str]]:
    """Every submitted value by upper-case name, to show the form again."""
    shown: dict[str, list[str]] = {}
    for name, value in pairs:
        shown.setdefault(name.upper(), []).append(value)
    for name, values in control.items():
        shown.setdefault(name, []).extend(values)
    return shown


def creation_errors(service: Service, pairs, uploads: dict,
                    control: dict[str, list[str]]) -> dict[str, str]:
    """Every problem of a creation request, by upper-case field name ("" = the form)."""
    errors = parameter_errors(service, pairs, uploads, creating=True)
    errors.update(control_errors(control))
    return errors


def parameter_errors(service: Service, pairs, uploads: dict, *,
                     creating: bool) -> dict[str, str]:
    """Every problem of the parameters of a creation (``creating``: the required ones
    must be there) or of a change, by upper-case field name."""
    errors: dict[str, str] = {}
    for name, value in pairs:
        try:
            service.spec(name).check(value)
        except ParameterError as exc:
            errors.setdefault(exc.name.upper(), exc.message)
    if not errors:
        try:
            collect(service, pairs, uploads, creating=creating)
        except ParameterError as exc:
            errors[exc.name.upper()] = exc.message
    return errors


def control_errors(control: dict[str, list[str]]) -> dict[str, str]:
    """Problems of the job-control fields, by name."""
    errors = {}
    for name, check in (("EXECUTIONDURATION", _check_duration),
                        ("DESTRUCTION", _check_destruction),
                        ("STARTAFTER", queueing.parse_start_after),
                        ("PRIORITY", queueing.parse_priority)):
        for value in control.get(name, []):
            try:
                check(value)
            except (BadRequest, ValueError) as exc:
                errors[name] = str(exc).removeprefix(f"{name}: ")
    for value in control.get("RUNID", []):
        try:
            check_run_id(value)
        except ValueError as exc:
            errors["RUNID"] = str(exc)
    return errors


def _check_duration(value: str) -> None:
    parse_duration(value)


def _check_destruction(value: str) -> None:
    if timeutil.parse_time(value) <= timeutil.now():
        raise ValueError("must be in the future")
