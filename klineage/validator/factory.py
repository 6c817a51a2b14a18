"""One place that turns a validator option into a client: local, HTTP or Ray (issue 17).

``make_validator(spec, cache=..., device=..., timing=...)`` is what ``klineage validate``, ``klineage
walk``, ``klineage optimize``, ``klineage validator serve`` and ``bench/evaluate_agent.py`` call, so that
every one of them takes the same ``--validator`` values:

* nothing, ``""`` or ``local`` — ``LocalValidator`` (this process is the trusted side);
* ``http://HOST:PORT`` or ``https://...`` — ``HttpValidator``, a running ``klineage validator serve``
  (its cache, device and timing options are the server's);
* ``ray`` — ``RayValidator`` on ``$RAY_ADDRESS``, else the cluster started on this host, else a new
  local one; ``ray:ADDRESS`` with ADDRESS ``auto`` (the cluster ``ray start --head`` started here),
  ``local`` (a new one-host cluster) or ``HOST:PORT`` (the head's GCS port, 6379 by default);
  ``ray://HOST:PORT`` — Ray Client (port 10001 by default);
* ``cache-only`` or ``cache-only:GPU`` — ``CacheOnlyValidator``: answers only from ``cache``, as the GPU
  named like GPU (default: the one with the most results there) measured it, and refuses what it never
  measured: a GPU's runs replayed on a machine without one, never a timing made up.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when called: the CLI imports this module for its help text
    from klineage.validator.cache import ResultStore
    from klineage.validator.cache_only import CacheOnlyValidator
    from klineage.validator.client import HttpValidator, LocalValidator
    from klineage.validator.ray_backend import RayValidator

__all__ = ["CACHE_ONLY", "VALIDATOR_HELP", "make_validator", "ray_address"]

CACHE_ONLY = "cache-only"

VALIDATOR_HELP = ("Where jobs run: 'local' (default: here), a validator service URL (http://HOST:8100), or a "
                  "Ray cluster: 'ray' ($RAY_ADDRESS or this host's), 'ray:auto', 'ray:HOST:6379', "
                  "'ray://HOST:10001' (one actor per GPU, one shared result cache), or 'cache-only[:GPU]' (only "
                  "what the result cache holds, as that GPU measured it: replays a GPU's runs anywhere).")


def ray_address(spec: str) -> tuple[bool, str | None]:
    """Whether a ``--validator`` value names Ray, and the address: None for plain ``ray`` (Ray's own
    default), ADDRESS for ``ray:ADDRESS``, the URL itself for ``ray://HOST:PORT``."""
    if spec == "ray":
        return True, None
    if spec.startswith("ray://"):
        return True, spec
    if spec.startswith("ray:") and len(spec) > len("ray:"):
        return True, spec[len("ray:"):]
    return False, None


def make_validator(spec: str | None = None, *, cache: ResultStore | Path | str | None = None, device: str = "auto",
                   timing: Mapping[str, Any] | None = None, timeout_s: float | None = None, seeds: int = 5,
                   max_timeout_s: float | None = None, actors: int | None = None,
                   ) -> LocalValidator | HttpValidator | RayValidator | CacheOnlyValidator:
    """The validator client ``spec`` names (see the module docstring); a value it does not know is a
    ``ValidationRequestError`` (bad usage), a Ray cluster it cannot reach a ``ValidatorUnavailable``.

    ``cache``, ``device``, ``timing``, ``timeout_s``, ``seeds`` and ``max_timeout_s`` go to a local or Ray
    validator as to ``LocalValidator``; ``actors`` only to Ray (default: one per GPU, or per CPU)."""
    from klineage.validator.client import HttpValidator, LocalValidator
    from klineage.validator.runner import ValidationRequestError

    value = (spec or "").strip()
    if value in ("", "local"):
        return LocalValidator(cache=cache, timeout_s=timeout_s, device=device, seeds=seeds, timing=timing,
                              max_timeout_s=max_timeout_s)
    if value.startswith(("http://", "https://")):
        return HttpValidator(value)
    if value == CACHE_ONLY or value.startswith(CACHE_ONLY + ":"):
        from klineage.validator.cache_only import CacheOnlyValidator

        if not isinstance(cache, Path | str):
            raise ValidationRequestError(f"validator {value!r} replays a result cache: give its file (--cache)", 400)
        try:
            return CacheOnlyValidator(cache, value[len(CACHE_ONLY) + 1:] or None, seeds=seeds, timing=timing)
        except (FileNotFoundError, ValueError) as exc:
            raise ValidationRequestError(f"validator {value!r}: {exc}", 400) from exc
    is_ray, address = ray_address(value)
    if is_ray:
        from klineage.validator.ray_backend import RayValidator

        return RayValidator(address, cache=cache, device=device,
                            actors=actors, timeout_s=timeout_s, seeds=seeds, timing=timing,
                            max_timeout_s=max_timeout_s)
    raise ValidationRequestError(f"unknown validator {value!r}: expected 'local', an http(s):// URL of a validator "
                                 "service, 'ray', 'ray:ADDRESS', 'ray://HOST:PORT' or 'cache-only[:GPU]'", 400)
