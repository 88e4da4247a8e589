"""Reaching the Hugging Face Hub, and what its failures mean to the user.

The Hub's address (HF_ENDPOINT, a mirror) and the token (HF_TOKEN) are read from the
environment at each call, never from a stored token file, and the token is never printed.
Every failure of huggingface_hub or of the network under it becomes one of the PullErrors
below, whose message says what to do: accept a gated model's terms, export HF_TOKEN, check
the proxy, or that a model already in the cache needs no pull.
"""

from __future__ import annotations

import os


class PullError(Exception):
    """A pull that cannot go ahead or did not finish; the message says what to do."""


class NeedsToken(PullError):
    """The repo is gated or private and no (or a refused) HF_TOKEN was given."""


class RepoNotFound(PullError):
    """No such repo, revision or file on the Hub."""


class NoSpace(PullError):
    """The cache's filesystem has too little free space for the files."""


class ChecksumMismatch(PullError):
    """A downloaded file's sha256 is not the one the Hub lists; it was not kept."""


class PullCancelled(PullError):
    """Interrupted (Ctrl-C); completed files stay in the cache for the next pull."""


def hub_endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None  # read now: the library's is fixed at import


def hub_token() -> str | bool:
    # Only the environment: False keeps huggingface_hub from reading a stored token file.
    return os.environ.get("HF_TOKEN") or False


def translate(exc: Exception, repo: str) -> PullError:
    """What huggingface_hub's (or the network's) `exc` means for a pull of `repo`, as a
    PullError whose message says what to do."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    has_token = bool(os.environ.get("HF_TOKEN"))
    if isinstance(exc, GatedRepoError):
        if has_token:
            return NeedsToken(
                f"{repo} is gated and HF_TOKEN was refused: accept the model's "
                "terms on its Hub page with the account the token belongs to"
            )
        return NeedsToken(
            f"{repo} is gated: accept its terms on the Hub, then export HF_TOKEN "
            "with a token of that account"
        )
    if isinstance(exc, RevisionNotFoundError):
        return RepoNotFound(f"{repo}: no such revision on the Hub")
    if isinstance(exc, EntryNotFoundError):
        return RepoNotFound(f"{repo}: a listed file is missing on the Hub ({exc})")
    if isinstance(exc, RepositoryNotFoundError):
        status = exc.response.status_code if exc.response is not None else None
        if status == 401 and not has_token:
            return NeedsToken(
                f"{repo} was not found or is private: export HF_TOKEN if it is "
                "yours or shared with you"
            )
        return RepoNotFound(
            f"{repo}: no such model repo on the Hub"
            + (" (or HF_TOKEN cannot see it)" if has_token else "")
        )
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        return PullError(f"{repo}: the Hub answered {status}")
    if _unreachable(exc):
        where = hub_endpoint() or "https://huggingface.co"
        return PullError(
            f"{repo}: the Hugging Face Hub ({where}) cannot be reached "
            f"({type(exc).__name__}: {exc}). Check this machine's network, DNS "
            "or proxy (HTTPS_PROXY), or set HF_ENDPOINT to a mirror; a model "
            "already in the cache needs no pull"
        )
    return PullError(f"{repo}: {type(exc).__name__}: {exc}")


def _unreachable(exc: BaseException) -> bool:
    """No answer from the Hub at all (DNS, refused, timeout, no network), as httpx or
    requests says it, possibly wrapped by huggingface_hub."""
    import httpx
    import requests

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(
            seen,
            (
                httpx.TransportError,
                requests.ConnectionError,
                requests.Timeout,
                ConnectionError,
                TimeoutError,
            ),
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
