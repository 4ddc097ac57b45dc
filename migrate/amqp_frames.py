"""Read RabbitMQ deliveries straight off the socket: whole frames cut out of large reads.

Why it exists: py-amqp reads one delivery as three frames, each with two or three ``recv``
calls and a timeout context, and decodes its properties with a general-purpose reader (a Celery
message carries about twenty headers in an AMQP field table): most of the drain's time on
RabbitMQ (``python -m bench --cells migrate`` shows the rate). Here the consumer channel's deliveries are cut out of one
buffer filled by reads of up to ``CHUNK`` bytes, and their properties are decoded by a loop
written for field tables. The values are the ones py-amqp would produce (short strings and
table keys decoded as UTF-8 with ``surrogatepass``, a long string that is not UTF-8 kept as
bytes, ``T`` as a naive UTC datetime, ...), so the rest of the drain sees no difference.

Everything that is not a delivery on the consumer channel (a heartbeat, a close, a
``basic.cancel`` from the broker, a frame of another channel, or a delivery whose frames another
channel's frames interleave) is handed to py-amqp unchanged and in order, and takes its usual
path, errors included. The buffer is py-amqp's own read buffer, so bytes read here and not yet
used are there for py-amqp's next synchronous call (``queue_declare``, ``basic_get``), and a
delivery is taken out of it only once all of its frames are in. A delivery whose properties do
not decode, or hold a value Python cannot (a ``T`` timestamp past year 9999, a table nested past
what Python can recurse into), is still handed over (with ``problem`` set): the drain
quarantines it instead of stopping, where py-amqp would have raised (an ``OSError`` from such a
timestamp even looked like the broker failing).

What it is not: an AMQP client. Connecting, channels, ``basic_qos``/``basic_consume``, acks and
``basic_get`` stay py-amqp's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from struct import Struct
from struct import error as StructError
from typing import Any

from amqp.exceptions import UnexpectedFrame

CHUNK = 256 * 1024  # bytes asked of the socket per read: several hundred Celery messages
FRAME_METHOD, FRAME_HEADER, FRAME_BODY = 1, 2, 3
FRAME_END = 0xCE
_DELIVER = Struct(">HH").pack(60, 60)  # basic.deliver: class 60, method 60
_FRAME = Struct(">BHI").unpack_from  # type, channel, payload size
_TAG_BITS = Struct(">QB").unpack_from  # delivery tag, redelivered
_U8, _I8 = Struct(">B").unpack_from, Struct(">b").unpack_from
_U16, _I16 = Struct(">H").unpack_from, Struct(">h").unpack_from
_U32, _I32 = Struct(">I").unpack_from, Struct(">i").unpack_from
_U64, _I64 = Struct(">Q").unpack_from, Struct(">q").unpack_from
_F32, _F64 = Struct(">f").unpack_from, Struct(">d").unpack_from
_BODY_SIZE = _U64
S, T, V, A, F = b"S"[0], b"t"[0], b"V"[0], b"A"[0], b"F"[0]
_I, _L, _LOWER_L = b"I"[0], b"L"[0], b"l"[0]

# (flag, property name, kind) in the order of AMQP's basic class, as py-amqp lists them.
_SHORTSTR, _TABLE, _OCTET, _TIMESTAMP = 0, 1, 2, 3
_PROPERTIES = (
    (0x8000, "content_type", _SHORTSTR),
    (0x4000, "content_encoding", _SHORTSTR),
    (0x2000, "application_headers", _TABLE),
    (0x1000, "delivery_mode", _OCTET),
    (0x0800, "priority", _OCTET),
    (0x0400, "correlation_id", _SHORTSTR),
    (0x0200, "reply_to", _SHORTSTR),
    (0x0100, "expiration", _SHORTSTR),
    (0x0080, "message_id", _SHORTSTR),
    (0x0040, "timestamp", _TIMESTAMP),
    (0x0020, "type", _SHORTSTR),
    (0x0010, "user_id", _SHORTSTR),
    (0x0008, "app_id", _SHORTSTR),
    (0x0004, "cluster_id", _SHORTSTR),
)


class FieldError(ValueError):
    """A field table or property list that does not decode."""


def _text(data: bytes, start: int, stop: int) -> str:
    return data[start:stop].decode("utf-8", "surrogatepass")


def _long_text(data: bytes, start: int, stop: int) -> str | bytes:
    raw = data[start:stop]
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return raw  # py-amqp keeps a long string that is not UTF-8 as bytes


def decode_table(data: bytes, offset: int, limit: int) -> dict[str | bytes, Any]:
    """The field table in ``data[offset:limit]`` (its length already read)."""
    out: dict[str | bytes, Any] = {}
    while offset < limit:
        size = data[offset]
        offset += 1
        raw_key = data[offset : offset + size]
        offset += size
        try:
            key: str | bytes = raw_key.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            key = raw_key
        kind = data[offset]
        if kind == S:  # the usual header value: inlined
            (size,) = _U32(data, offset + 1)
            offset += 5 + size
            out[key] = _long_text(data, offset - size, offset)
        elif kind == V:
            offset += 1
            out[key] = None
        else:
            out[key], offset = _value(data, offset)
    if offset != limit:
        raise FieldError("a field table runs past its length")
    return out


def _value(data: bytes, offset: int) -> tuple[Any, int]:
    """One typed field value at ``offset`` (its type octet) and the offset after it."""
    kind = data[offset]
    offset += 1
    if kind == S:
        (size,) = _U32(data, offset)
        offset += 4 + size
        return _long_text(data, offset - size, offset), offset
    if kind == V:
        return None, offset
    if kind == T:
        return bool(data[offset]), offset + 1
    if kind == _I:
        return _I32(data, offset)[0], offset + 4
    if kind in (_L, _LOWER_L):
        return _I64(data, offset)[0], offset + 8
    if kind == F:
        (size,) = _U32(data, offset)
        offset += 4
        return decode_table(data, offset, offset + size), offset + size
    if kind == A:
        (size,) = _U32(data, offset)
        offset += 4
        limit = offset + size
        items = []
        while offset < limit:
            item, offset = _value(data, offset)
            items.append(item)
        if offset != limit:
            raise FieldError("a field array runs past its length")
        return items, offset
    return _rare(kind, data, offset)


def _rare(kind: int, data: bytes, offset: int) -> tuple[Any, int]:
    letter = chr(kind)
    if letter == "s":  # RabbitMQ's 16-bit signed int
        return _I16(data, offset)[0], offset + 2
    if letter == "x":
        (size,) = _U32(data, offset)
        return data[offset + 4 : offset + 4 + size], offset + 4 + size
    if letter == "b":
        return _I8(data, offset)[0], offset + 1
    if letter == "B":
        return _U8(data, offset)[0], offset + 1
    if letter == "U":
        return _I16(data, offset)[0], offset + 2
    if letter == "u":
        return _U16(data, offset)[0], offset + 2
    if letter == "i":
        return _U32(data, offset)[0], offset + 4
    if letter == "f":
        return _F32(data, offset)[0], offset + 4
    if letter == "d":
        return _F64(data, offset)[0], offset + 8
    if letter == "D":
        places = data[offset]
        (number,) = _I32(data, offset + 1)
        return Decimal(number) / Decimal(10**places), offset + 5
    if letter == "T":
        (seconds,) = _U64(data, offset)
        try:
            instant = datetime.fromtimestamp(seconds, tz=UTC)
        except (OverflowError, OSError, ValueError):  # OSError: EOVERFLOW from the C library
            raise FieldError(f"timestamp {seconds} is outside what a datetime holds") from None
        return instant.replace(tzinfo=None), offset + 8
    raise FieldError(f"unknown field type {letter!r} in a table")


def decode_properties(data: bytes, offset: int) -> dict[str, Any]:
    """The basic-class properties at ``offset`` (the property flags), as py-amqp's
    ``decode_properties_basic`` returns them."""
    (flags,) = _U16(data, offset)
    offset += 2
    properties: dict[str, Any] = {}
    for flag, name, kind in _PROPERTIES:
        if not flags & flag:
            continue
        if kind == _SHORTSTR:
            size = data[offset]
            offset += 1 + size
            properties[name] = _text(data, offset - size, offset)
        elif kind == _TABLE:
            (size,) = _U32(data, offset)
            offset += 4 + size
            properties[name] = decode_table(data, offset - size, offset)
        elif kind == _OCTET:
            properties[name] = data[offset]
            offset += 1
        else:
            (properties[name],) = _U64(data, offset)
            offset += 8
    return properties


# consumer tag, delivery tag, redelivered, exchange, routing key, properties, body, problem,
# size (the content header's properties and the body, in bytes, as received)
Deliver = Callable[[str, int, bool, str, str, dict[str, Any], bytes, str | None, int], bool]


class DeliveryReader:
    """Cuts the deliveries of ``channel_id`` out of ``connection``'s byte stream.

    ``deliver`` receives each one and returns False for a consumer tag it does not know (the
    delivery then goes to py-amqp, which calls that consumer's callback or rejects it)."""

    def __init__(self, connection: Any, channel_id: int, deliver: Deliver) -> None:
        self.connection = connection
        self.transport = connection.transport
        self.channel_id = channel_id
        self.deliver = deliver
        self.handover = False  # py-amqp holds part of a content of this channel: it finishes it

    @staticmethod
    def usable(connection: Any) -> bool:
        """True when this py-amqp keeps its read buffer where this reader shares it."""
        transport = getattr(connection, "transport", None)
        return isinstance(getattr(transport, "_read_buffer", None), bytes) and hasattr(
            transport, "sock"
        )

    def read(self, timeout: float) -> int:
        """Take every whole frame buffered; when none was, read once from the socket (waiting
        at most ``timeout`` seconds: ``TimeoutError`` when nothing came) and take again.
        Returns how many frames were taken (0: a frame is still incomplete)."""
        taken = self._take()
        if taken:
            return taken
        sock = self.transport.sock
        previous = sock.gettimeout()
        sock.settimeout(timeout)
        try:
            chunk = sock.recv(CHUNK)
        finally:
            sock.settimeout(previous)
        if not chunk:
            self.transport.connected = False
            raise ConnectionResetError("RabbitMQ closed the connection")
        self.transport._read_buffer += chunk
        return self._take()

    def _take(self) -> int:
        transport = self.transport
        data: bytes = transport._read_buffer
        end = len(data)
        pos = 0
        frames = 0
        ours = self.channel_id
        try:
            while end - pos >= 8:
                kind, channel, size = _FRAME(data, pos)
                start = pos + 7
                stop = start + size
                if stop >= end:
                    break  # the frame-end octet is not here yet
                if data[stop] != FRAME_END:
                    raise UnexpectedFrame(f"frame end byte {data[stop]:#04x}, not 0xce")
                if not (
                    kind == FRAME_METHOD
                    and channel == ours
                    and not self.handover
                    and data[start : start + 4] == _DELIVER
                ):
                    pos = stop + 1
                    frames += 1
                    self._hand_over(kind, channel, data[start:stop])
                    continue
                after = self._delivery(data, start, stop, end)
                if after == 0:
                    break  # its header or body is not all here yet
                if after < 0:  # another channel's frames interleave: py-amqp reads this one
                    pos = stop + 1
                    frames += 1
                    self._hand_over(kind, channel, data[start:stop])
                    continue
                pos = after
                frames += 1
        finally:
            transport._read_buffer = data[pos:] if pos else data
        self.connection.bytes_recv += frames
        return frames

    def _hand_over(self, kind: int, channel: int, payload: bytes) -> None:
        done = self.connection.on_inbound_frame((kind, channel, payload))
        if channel == self.channel_id:
            self.handover = not done

    def _delivery(self, data: bytes, start: int, stop: int, end: int) -> int:
        """One delivery whose method frame is ``data[start:stop]``: delivered, and the offset
        after its last frame returned; 0 when a frame is missing, -1 when it is not ours."""
        ours = self.channel_id
        pos: int = stop + 1
        if end - pos < 8:
            return 0
        kind, channel, size = _FRAME(data, pos)
        if kind != FRAME_HEADER or channel != ours:
            return -1
        header = pos + 7
        pos = header + size + 1
        if pos > end:
            return 0
        if data[pos - 1] != FRAME_END:
            raise UnexpectedFrame("a content header frame does not end with 0xce")
        head = data[header : pos - 1]  # bounded: a property list cannot read past its frame
        (body_size,) = _BODY_SIZE(head, 4)
        parts: list[bytes] = []
        got = 0
        while got < body_size:
            if end - pos < 8:
                return 0
            kind, channel, size = _FRAME(data, pos)
            if kind != FRAME_BODY or channel != ours:
                return -1
            first = pos + 7
            pos = first + size + 1
            if pos > end:
                return 0
            if data[pos - 1] != FRAME_END:
                raise UnexpectedFrame("a content body frame does not end with 0xce")
            parts.append(data[first : pos - 1])
            got += size
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        method = data[start:stop]
        offset = 5 + method[4]
        consumer = _text(method, 5, offset)
        tag, bits = _TAG_BITS(method, offset)
        offset += 9
        problem = None
        try:
            size = method[offset]
            offset += 1 + size
            exchange = _text(method, offset - size, offset)
            size = method[offset]
            offset += 1 + size
            routing_key = _text(method, offset - size, offset)
            properties = decode_properties(head, 12)
        except (FieldError, UnicodeDecodeError, IndexError, StructError, RecursionError) as exc:
            exchange = routing_key = ""
            properties = {}
            problem = f"its AMQP frames do not decode: {type(exc).__name__}: {exc}"
        size = len(head) - 12 + body_size
        if not self.deliver(
            consumer, tag, bool(bits & 1), exchange, routing_key, properties, body, problem, size
        ):
            return -1
        return pos
