"""py-amqp's decoding of a content header never raises out of drain_events (reliable_messaging._amqp_properties):
what it cannot decode arrives as a marker the consumer dead-letters."""

import struct

import pytest
from amqp import basic_message
from amqp.serialization import dumps
from reliable_messaging import _amqp_properties as amqp_properties

BASIC = 60
HEADERS_FLAG, MESSAGE_ID_FLAG = 0x2000, 0x0080


def header_table(raw_table: bytes) -> bytes:
    return struct.pack(">H", HEADERS_FLAG) + struct.pack(">I", len(raw_table)) + raw_table


def decoded(buf: bytes) -> dict:
    amqp_properties.install()
    message = basic_message.Message()
    message._load_properties(BASIC, buf, 0)
    return message.properties


@pytest.mark.parametrize(
    ("buf", "error"),
    [
        (
            struct.pack(">HB", MESSAGE_ID_FLAG, 2) + b"\xff\xfe",
            "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff",
        ),
        (header_table(b"\x01tT" + struct.pack(">Q", 2**63)), "OverflowError"),  # a timestamp past year 9999
        (header_table(b"\x01a" + b"A\x00\x00\x00\x05" * 5000), "RecursionError"),  # nested 5,000 deep
        (header_table(b"\x01aZ"), "FrameSyntaxError"),  # a type no table has
    ],
)
def test_properties_that_cannot_be_decoded_arrive_as_a_marker_naming_the_error(buf, error):
    properties = decoded(buf)

    assert list(properties) == ["application_headers"]
    assert list(properties["application_headers"]) == [amqp_properties.UNDECODABLE]
    assert error in properties["application_headers"][amqp_properties.UNDECODABLE]


def test_properties_that_can_be_decoded_are_read_as_py_amqp_reads_them():
    buf = struct.pack(">HB", MESSAGE_ID_FLAG, 1) + b"m"
    table = dumps("F", [{"event_type": "notes.note.written", "n": 2**40}])

    assert decoded(buf) == {"message_id": "m"}
    assert decoded(struct.pack(">H", HEADERS_FLAG) + table) == {
        "application_headers": {"event_type": "notes.note.written", "n": 2**40}
    }
