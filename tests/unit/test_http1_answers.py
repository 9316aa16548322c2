"""The one bounded HTTP/1.1 answer reader of the client's kept connections
and the nodes' peer channels."""

from __future__ import annotations

import asyncio

import pytest

from lograft.http1_answers import (
    BodyTooLong,
    content_length,
    parse_head,
    read_chunked,
    read_to_end,
)


def reader_of(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=64 * 1024)
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def test_a_head_gives_status_headers_and_keep():
    status, headers, keep = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: b \r\n\r\n")
    assert (status, headers, keep) == (200, [("Content-Length", "3"), ("X-A", "b")], True)


@pytest.mark.parametrize(
    ("head", "keep"),
    [
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", True),
    ],
)
def test_connection_header_decides_keep(head, keep):
    assert parse_head(head)[2] is keep


@pytest.mark.parametrize(
    "head",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 600 What\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n Folded: x\r\n\r\n",
    ],
)
def test_what_is_not_an_http_answer_is_refused(head):
    with pytest.raises(ValueError):
        parse_head(head)


@pytest.mark.parametrize("text", ["+5", " 5", "1_0", "-1", "\u0661", ""])
def test_a_content_length_is_ascii_digits_only(text):
    with pytest.raises(ValueError):
        content_length(text)


async def test_a_chunked_body_within_the_limit_is_read():
    body = await read_chunked(reader_of(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"), 5)
    assert body == b"abcde"


async def test_a_chunked_body_past_the_limit_is_refused_before_reading_it():
    with pytest.raises(BodyTooLong):
        await read_chunked(reader_of(b"3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n"), 5)


async def test_a_read_to_close_body_past_the_limit_is_refused():
    assert await read_to_end(reader_of(b"abcde"), 5) == b"abcde"
    with pytest.raises(BodyTooLong):
        await read_to_end(reader_of(b"abcdef"), 5)
