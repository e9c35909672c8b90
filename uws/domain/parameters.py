"""Typed parameter declarations and the validation of submitted values.

Validation lives here so that the XML API and the HTML forms reject the same
things with the same messages.  Names are case-insensitive (DALI 1.1 §3.1);
values are kept exactly as sent, but for booleans: ``true`` or ``false`` in any case,
kept (and passed on to the command or runner) as ``true`` or ``false``.
"""
from __future__ import annotations

import dataclasses
import math
import re

from . import numbers, timeutil
from .model import fits_xml

TYPES = ("string", "integer", "float", "boolean", "datetime", "enum", "file")
#: A boolean parameter's words (any case): DALI writes booleans as these,
#: and a command should never have to read "yes", "on" or "1" as one.
BOOLEAN_WORDS = {"true": True, "false": False}
# A parameter name is also a file name (uploads) and a placeholder in commands.
PARAM_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
URL_VALUE = re.compile(r"^https?://[^\s]+$", re.IGNORECASE)


class ParameterError(ValueError):
    """A request parameter is unknown, missing or malformed (HTTP 400)."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


def _value_text(raw) -> str:
    """A default as the text a client would send (TOML may give a number or a boolean)."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (str, int, float)):
        return str(raw)
    raise TypeError(f"must be a string, a number or a boolean, not {type(raw).__name__}")


def declared(default, **metadata):
    """A dataclass field with what the configuration loader checks of its value."""
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One declared parameter (a ``[[services.NAME.parameters]]`` table)."""
    name: str
    type: str = declared("string", choices=TYPES)
    required: bool = False
    default: str | None = declared(None, read=_value_text)
    description: str = ""
    minimum: float | None = declared(None, key="min")
    maximum: float | None = declared(None, key="max")
    max_length: int = declared(65536, min=1)
    choices: tuple[str, ...] = ()
    multiple: bool = False
    allow_options: bool = False    # a command may receive a value starting with "-"

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"parameter {self.name}: unknown type {self.type!r}")
        if not PARAM_NAME.fullmatch(self.name):
            raise ValueError(f"parameter name {self.name!r}: a letter, then letters, digits, "
                             "_, . or - (at most 64)")
        if (self.type == "enum") != bool(self.choices):
            raise ValueError(f"parameter {self.name}: choices are for enum parameters, "
                             "and an enum needs them")
        numeric = self.type in ("integer", "float")
        if not numeric and (self.minimum is not None or self.maximum is not None):
            raise ValueError(f"parameter {self.name}: min and max are for integer and float "
                             "parameters")
        if (numeric and self.minimum is not None and self.maximum is not None
                and self.minimum > self.maximum):
            raise ValueError(f"parameter {self.name}: min is above max")
        self._check_default()

    def _check_default(self):
        if self.default is None:
            return
        if self.required:
            raise ValueError(f"parameter {self.name}: a required parameter takes no default")
        try:
            self.check(self.default)
        except ParameterError as exc:
            raise ValueError(f"parameter {self.name}: default {self.default!r}: "
                             f"{exc.message}") from None

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    def check(self, text: str) -> str:
        """Validate one submitted value and return it as it is kept: unchanged, but for
        a boolean's word in lower case."""
        if len(text) > self.max_length:
            raise ParameterError(self.name, f"longer than {self.max_length} characters")
        if not fits_xml(text):
            raise ParameterError(self.name, "contains a control character")
        if self.multiple and ("\n" in text or "\r" in text):
            # GET {job}/parameters/NAME shows one value per line
            raise ParameterError(self.name, "a value of a parameter given several times "
                                 "is one line")
        value = self.convert(text)
        if self.type == "boolean":
            return "true" if value else "false"
        return text

    def convert(self, text: str):
        """The typed value of ``text``; ParameterError if it is not one."""
        kind = self.type
        if kind == "string":
            return text
        if kind == "integer":
            return self._in_range(_parse_int(self.name, text))
        if kind == "float":
            return self._in_range(_parse_float(self.name, text))
        if kind == "boolean":
            return _parse_bool(self.name, text)
        if kind == "datetime":
            try:
                return timeutil.parse_time(text)
            except ValueError as exc:
                raise ParameterError(self.name, str(exc)) from None
        if kind == "enum":
            if text not in self.choices:
                raise ParameterError(self.name, f"must be one of {', '.join(self.choices)}")
            return text
        # file: a URL kept by reference (uploads never come through here)
        if not URL_VALUE.fullmatch(text):
            raise ParameterError(self.name, "must be an uploaded file or an http(s) URL")
        return text

    def _in_range(self, number):
        if self.minimum is not None and number < self.minimum:
            raise ParameterError(self.name, f"must be at least {_num(self.minimum)}")
        if self.maximum is not None and number > self.maximum:
            raise ParameterError(self.name, f"must be at most {_num(self.maximum)}")
        return number


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _parse_int(name: str, text: str) -> int:
    try:
        return numbers.integer(text)
    except ValueError as exc:
        raise ParameterError(name, str(exc)) from None


def _parse_float(name: str, text: str) -> float:
    try:
        value = numbers.decimal(text)
    except ValueError as exc:
        raise ParameterError(name, str(exc)) from None
    if not math.isfinite(value):    # 1e999
        raise ParameterError(name, f"not a finite number: {text!r}")
    return value


def _parse_bool(name: str, text: str) -> bool:
    value = BOOLEAN_WORDS.get(text.lower())
    if value is None:
        raise ParameterError(name, f"not a boolean: {text!r} (accepted: true or false, "
                             "in any case)")
    return value


def typed_values(specs, parameters) -> dict:
    """Typed values for a runner: {name: value}, a list for multi-valued names."""
    by_name = {spec.name: spec for spec in specs}
    out: dict = {}
    for p in parameters:
        spec = by_name[p.name]
        value = p.value if spec.is_file else spec.convert(p.value)
        if spec.multiple:
            out.setdefault(spec.name, []).append(value)
        else:
            out[spec.name] = value
    return out
