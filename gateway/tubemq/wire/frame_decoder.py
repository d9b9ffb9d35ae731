"""The incremental TubeMQ frame decoder, sans-IO (protocol doc §1.2): any split of a byte stream in, completed
frames out. The format, the encoder and the limits it checks are :mod:`gateway.tubemq.wire.frame`'s.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from gateway.tubemq.wire.frame import (
    DEFAULT_MAX_FRAME_BYTES,
    HEADER_ONE_BLOCK_STRUCT,
    HEADER_SIZE,
    HEADER_STRUCT,
    LENGTH_STRUCT,
    MAX_LIST_SIZE,
    PREFIX_SIZE,
    TOKEN_SIGNED,
    Frame,
    FrameError,
)
from gateway.tubemq.wire.speedups import compiled_or

__all__ = ["FrameDecoder"]


class FrameLoops(Protocol):
    """What gateway/tubemq/wire/_frame_decoder.c holds, and its twin :class:`_Python`."""

    def set_frame_type(self, cls: type, /) -> None:
        """The Frame class whole_frames builds (the C loop stores its two slots directly, so it checks
        the class's shape here and refuses any other)."""

    def whole_frames(self, data: Any, pos: int, limit: int, frames: list[Any], /) -> int:
        """From ``pos``, each complete frame of one block whose header is the begin token, listSize 1
        and a block length in 0..``limit`` that fits ``data`` is appended to ``frames``; returns where the
        first other frame (or the end) starts."""

    def whole_blocks(
        self, data: Any, pos: int, blocks_left: int, room: int, pieces: list[bytes], /
    ) -> tuple[int, int, int]:
        """From ``pos`` (where a block length is due), up to ``blocks_left`` blocks lying whole in ``data``
        whose length is in 0..``data``'s end and fits ``room`` (bytes the frame may still take, prefixes
        included) are taken: each one's bytes, its length prefix left out, appended to ``pieces``. Returns
        (where the first other block starts, the blocks still due, the room left)."""


class _Python:
    """The reference of the C loop: one unpack per frame."""

    @staticmethod
    def set_frame_type(cls: type, /) -> None:
        """Nothing to learn: the loop below builds each Frame by calling the class."""

    @staticmethod
    def whole_frames(data: Any, pos: int, limit: int, frames: list[Any], /) -> int:
        unpack = HEADER_ONE_BLOCK_STRUCT.unpack_from
        end = len(data)
        pos = max(pos, 0)
        while end - pos >= HEADER_SIZE + PREFIX_SIZE:
            token, serial, list_size, length = unpack(data, pos)
            start = pos + HEADER_SIZE + PREFIX_SIZE
            if token != TOKEN_SIGNED or list_size != 1 or not 0 <= length <= limit or length > end - start:
                break
            pos = start + length
            frames.append(Frame(serial, bytes(data[start:pos])))
        return pos

    @staticmethod
    def whole_blocks(
        data: Any, pos: int, blocks_left: int, room: int, pieces: list[bytes], /
    ) -> tuple[int, int, int]:
        unpack = LENGTH_STRUCT.unpack_from
        end = len(data)
        pos = max(pos, 0)
        append = pieces.append
        while blocks_left > 0 and end - pos >= PREFIX_SIZE:
            (length,) = unpack(data, pos)
            start = pos + PREFIX_SIZE
            if not 0 <= length <= end - start or PREFIX_SIZE + length > room:
                break
            room -= PREFIX_SIZE + length
            pos = start + length
            append(bytes(data[start:pos]))
            blocks_left -= 1
        return pos, blocks_left, room


if TYPE_CHECKING:
    import gateway.tubemq.wire._frame_decoder as _frame_decoder

    _stub: FrameLoops = _frame_decoder

_loops: FrameLoops = compiled_or("gateway.tubemq.wire._frame_decoder", _Python())
_loops.set_frame_type(Frame)  # the C loop builds Frames itself: a class of another shape fails here


class _State(Enum):
    HEADER = "header"
    LENGTH = "block length"
    BLOCK = "block bytes"
    FAILED = "failed"


class FrameDecoder:
    """Incremental frame decoder: feed it any split of the byte stream, get completed frames.

    Only the bytes of the frame in progress are kept (at most ``max_frame_bytes`` plus a partial
    header). Block lengths are checked against ``max_frame_bytes`` before any block byte is buffered.
    After the first ``FrameError`` every further ``feed`` raises ``FrameError`` too.
    """

    __slots__ = (
        "_block_left",
        "_blocks_left",
        "_body_bytes",
        "_error",
        "_max_frame_bytes",
        "_partial",
        "_payload",
        "_payload_bytes",
        "_serial",
        "_state",
    )

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        """``max_frame_bytes`` bounds a frame's size after its header, prefixes included, in bytes."""
        if max_frame_bytes < PREFIX_SIZE:
            raise ValueError(f"max_frame_bytes must be at least {PREFIX_SIZE}, got {max_frame_bytes}")
        self._max_frame_bytes = max_frame_bytes
        self._state = _State.HEADER
        self._partial = bytearray()  # an incomplete header or block length
        # Block bytes of the frame in progress, as pieces joined once when it completes: a large answer
        # then lands in fresh memory once (growing a buffer and copying it out touched it twice).
        self._payload: list[bytes] = []
        self._payload_bytes = 0
        self._serial = 0
        self._blocks_left = 0
        self._block_left = 0
        self._body_bytes = 0  # bytes after the header announced so far, prefixes included
        self._error = ""

    def __repr__(self) -> str:
        if self._state is _State.HEADER and not self._partial:
            where = "between frames"
        elif self._state is _State.FAILED:
            where = f"failed: {self._error}"
        else:
            where = (
                f"in frame serial={self._serial}, {self._state.value}, blocks_left={self._blocks_left}, "
                f"buffered={self.buffered_bytes}"
            )
        return f"<FrameDecoder {where}, max_frame_bytes={self._max_frame_bytes}>"

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for the frame in progress (0 between frames)."""
        return len(self._partial) + self._payload_bytes

    @property
    def at_frame_boundary(self) -> bool:
        """True when no partial frame is held, i.e. the stream may end here cleanly."""
        return self._state is _State.HEADER and not self._partial

    @property
    def failed(self) -> bool:
        """True once a ``FrameError`` was raised; the decoder then refuses all input."""
        return self._state is _State.FAILED

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Consume ``data`` and return the frames it completes, in stream order."""
        if self._state is _State.FAILED:
            raise FrameError(
                f"frame decoder already failed: {self._error}; close the link, the stream cannot resync"
            )
        frames: list[Frame] = []
        with memoryview(data) as raw, raw.cast("B") as view:
            try:
                self._consume(view, frames)
            except FrameError as exc:
                self._fail(str(exc))
                raise
        return frames

    def _fail(self, message: str) -> None:
        self._state = _State.FAILED
        self._error = message
        self._partial = bytearray()
        self._payload = []
        self._payload_bytes = 0

    def _consume(self, view: memoryview, frames: list[Frame]) -> None:
        pos = 0
        end = len(view)
        while pos < end:
            if self._state is _State.HEADER and not self._partial:
                pos = self._whole_frames(view, pos, end, frames)
                if pos == end:
                    return
            if self._state is _State.BLOCK:
                pos = self._read_block(view, pos, end, frames)
                continue
            if self._state is _State.LENGTH and not self._partial:
                pos = self._whole_blocks(view, pos, end, frames)
                if pos == end or self._state is not _State.LENGTH:
                    continue
            need = HEADER_SIZE if self._state is _State.HEADER else PREFIX_SIZE
            got = self._read_fixed(view, pos, end, need)
            if got is None:
                return
            fields, at, pos = got
            if self._state is _State.HEADER:
                self._start_frame(*HEADER_STRUCT.unpack_from(fields, at))
            else:
                self._start_block(LENGTH_STRUCT.unpack_from(fields, at)[0])
                if self._block_left == 0:
                    # An empty block must complete now, not when the next chunk arrives.
                    self._block_done(frames)
            self._partial.clear()

    def _read_fixed(
        self, view: memoryview, pos: int, end: int, need: int
    ) -> tuple[bytearray | memoryview, int, int] | None:
        """Get ``need`` bytes (header or block length) as ``(buffer, offset, new pos)``, or None if short."""
        if self._partial:
            take = min(need - len(self._partial), end - pos)
            self._partial += view[pos : pos + take]
            if len(self._partial) < need:
                return None
            return self._partial, 0, pos + take
        if end - pos >= need:
            return view, pos, pos + need
        self._partial += view[pos:end]
        return None

    def _read_block(self, view: memoryview, pos: int, end: int, frames: list[Frame]) -> int:
        take = min(self._block_left, end - pos)
        if take == self._block_left and self._blocks_left == 1 and not self._payload:
            # The whole payload lies in this chunk: copy it once, skipping the payload buffer.
            frames.append(Frame(self._serial, view[pos : pos + take].tobytes()))
            self._state = _State.HEADER
            return pos + take
        self._payload.append(view[pos : pos + take].tobytes())
        self._payload_bytes += take
        self._block_left -= take
        if self._block_left == 0:
            self._block_done(frames)
        return pos + take

    def _whole_frames(self, view: memoryview, pos: int, end: int, frames: list[Frame]) -> int:
        """Slice out complete single-block frames lying at ``pos``; return where they stop.

        The hot path for rpc traffic (payloads under 8192 bytes; a batch's answers come some hundred to a
        read): one call for them all, ``whole_frames`` of the loops chosen at import (``_frame_decoder.c``
        or its twin, :class:`_Python`). Anything else, including every malformed header, is left to the
        general state machine.
        """
        data = view if end == len(view) else view[:end]
        return _loops.whole_frames(data, pos, self._max_frame_bytes - PREFIX_SIZE, frames)

    def _whole_frames_py(self, view: memoryview, pos: int, end: int, frames: list[Frame]) -> int:
        """:meth:`_whole_frames` through the Python twin, whichever path the process chose."""
        return _Python.whole_frames(view[:end], pos, self._max_frame_bytes - PREFIX_SIZE, frames)

    def _whole_blocks(self, view: memoryview, pos: int, end: int, frames: list[Frame]) -> int:
        """Take the blocks lying whole at ``pos`` (a block length is due) into the payload; return where
        they stop. A large answer comes in 8192-byte blocks, some 65 to a 530 KB GetMessage answer, 20 to 30
        of them in one read: one call takes them all (``whole_blocks`` of the loops chosen at import) instead
        of two turns of the state machine each. A block that is cut off, too long or negative is left to
        the general state machine (which reads or refuses it). Each block is copied out of the read (reused
        memory) as a piece of its own (8 KiB: heap memory, whatever the allocator's thresholds); the pieces
        are joined once the frame is complete."""
        room = self._max_frame_bytes - self._body_bytes
        data = view if end == len(view) else view[:end]
        blocks_left = self._blocks_left
        pos, left, room_left = self._take_blocks(data, pos, blocks_left, room)
        if left == blocks_left:
            return pos
        self._payload_bytes += room - room_left - PREFIX_SIZE * (blocks_left - left)
        self._body_bytes += room - room_left
        self._blocks_left = left
        if not left:
            self._complete(frames)
        return pos

    def _take_blocks(self, data: memoryview, pos: int, blocks_left: int, room: int) -> tuple[int, int, int]:
        return _loops.whole_blocks(data, pos, blocks_left, room, self._payload)

    def _take_blocks_py(
        self, data: memoryview, pos: int, blocks_left: int, room: int
    ) -> tuple[int, int, int]:
        """:meth:`_take_blocks` through the Python twin, whichever path the process chose."""
        return _Python.whole_blocks(data, pos, blocks_left, room, self._payload)

    def _start_frame(self, token: int, serial: int, list_size: int) -> None:
        if token != TOKEN_SIGNED:
            raw = LENGTH_STRUCT.pack(token).hex(" ")
            raise FrameError(f"wrong begin token {raw}, expected ff 7f f4 fe: not a TubeMQ stream")
        if list_size <= 0 or list_size > MAX_LIST_SIZE:
            why = "a frame needs at least one block" if list_size == 0 else f"allowed 1..{MAX_LIST_SIZE}"
            raise FrameError(f"frame serial={serial} has listSize {list_size}: {why}")
        self._serial = serial
        self._blocks_left = list_size
        self._body_bytes = 0
        self._state = _State.LENGTH

    def _start_block(self, length: int) -> None:
        if length < 0:
            raise FrameError(f"frame serial={self._serial} has a negative block length {length}")
        body = self._body_bytes + PREFIX_SIZE + length
        if body > self._max_frame_bytes:
            raise FrameError(
                f"frame serial={self._serial} grows to {body} bytes with a {length}-byte block, "
                f"above max_frame_bytes={self._max_frame_bytes}"
            )
        self._body_bytes = body
        self._block_left = length
        self._state = _State.BLOCK

    def _block_done(self, frames: list[Frame]) -> None:
        self._blocks_left -= 1
        if self._blocks_left:
            self._state = _State.LENGTH
            return
        self._complete(frames)

    def _complete(self, frames: list[Frame]) -> None:
        pieces = self._payload
        frames.append(Frame(self._serial, pieces[0] if len(pieces) == 1 else b"".join(pieces)))
        self._payload = []
        self._payload_bytes = 0
        self._state = _State.HEADER
