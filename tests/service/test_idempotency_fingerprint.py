"""The fingerprint an idempotency key is held to (hypothesis): requests that would store the same messages
have equal fingerprints, and any difference in what is stored (the body, its kind, a raw message's option
headers) gives another; headers that store nothing (credentials, request ids) do not count."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.api.publish_parse import RAW_OPTION_HEADERS, stored_parts
from gateway.service.idempotency import fingerprint

_kinds = st.sampled_from(["json", "octets"])
_options = st.dictionaries(st.sampled_from(RAW_OPTION_HEADERS), st.text(max_size=12), max_size=5)
_others = st.dictionaries(
    st.sampled_from(["authorization", "x-request-id", "x-api-key", "user-agent"]), st.text(max_size=8)
)
_requests = st.tuples(_kinds, st.binary(max_size=64), _options)


@given(_requests, _others, _others)
def test_equal_requests_have_equal_fingerprints(
    request: tuple[str, bytes, dict[str, str]], noise: dict[str, str], other_noise: dict[str, str]
) -> None:
    kind, body, options = request
    first = fingerprint(stored_parts(kind, body, {**noise, **options}))
    second = fingerprint(stored_parts(kind, bytes(body), {**other_noise, **dict(options)}))
    assert first == second


@given(_requests, _requests)
def test_any_stored_difference_gives_another_fingerprint(
    one: tuple[str, bytes, dict[str, str]], two: tuple[str, bytes, dict[str, str]]
) -> None:
    stored_one = (one[0], one[1], one[2] if one[0] == "octets" else {})
    stored_two = (two[0], two[1], two[2] if two[0] == "octets" else {})
    same = fingerprint(stored_parts(*one)) == fingerprint(stored_parts(*two))
    assert same == (stored_one == stored_two)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=8), st.text(max_size=8)), max_size=6))
def test_parts_are_never_confused_with_their_neighbours(parts: list[bytes | str | None]) -> None:
    # moving bytes from one part to the next, or an empty part for a missing one, changes the fingerprint
    joined = [b"".join(p if isinstance(p, bytes) else (p or "").encode() for p in parts)]
    if joined != parts:
        assert fingerprint(parts) != fingerprint(joined)
    assert fingerprint([*parts, None]) != fingerprint([*parts, b""]) != fingerprint([*parts, ""])
