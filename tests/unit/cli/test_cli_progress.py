"""The progress bar (`cli.progress`, rich on stderr): what it shows, when it
shows, and that it never reaches stdout, where the data goes."""

from __future__ import annotations

import io
import re

from lograft.cli.consume import _progress_mode
from lograft.cli.progress import AUTO_SHOW_AFTER_S, REDRAW_INTERVAL_S, Progress, waiting

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def plain(text: str) -> str:
    return ANSI.sub("", text)


def test_a_known_total_shows_percentage_count_and_rate():
    now = [0.0]
    out = io.StringIO()
    p = Progress(out, mode=True, total=1000, what="records sent", clock=lambda: now[0])
    now[0] = 2.0
    p.update(400, 500)
    shown = plain(out.getvalue())
    assert "50%" in shown and "400 records sent  200 records/s" in shown
    p.clear()
    assert out.getvalue().endswith("\x1b[2K")  # the bar's line is erased


def test_an_unknown_total_shows_no_percentage():
    now = [0.0]
    out = io.StringIO()
    p = Progress(out, mode=True, total=None, what="records read", clock=lambda: now[0])
    now[0] = 1.0
    p.update(5, 5)
    assert "5 records read  5 records/s" in plain(out.getvalue())
    assert "%" not in plain(out.getvalue())
    p.clear()


def test_redraws_are_spaced():
    now = [0.0]
    out = io.StringIO()
    p = Progress(out, mode=True, total=None, what="records read", clock=lambda: now[0])
    p.update(1, 1)
    now[0] = REDRAW_INTERVAL_S / 2
    p.update(2, 2)
    assert "2 records read" not in plain(out.getvalue())
    now[0] = REDRAW_INTERVAL_S
    p.update(3, 3)
    assert "3 records read" in plain(out.getvalue())
    p.clear()


def test_auto_mode_draws_on_a_terminal_once_the_run_is_long():
    now = [0.0]
    out = Tty()
    p = Progress(out, mode=None, total=None, what="records sent", clock=lambda: now[0])
    p.update(10, 10)
    assert out.getvalue() == ""  # a short run never shows a bar
    now[0] = AUTO_SHOW_AFTER_S + 0.5
    p.update(20, 20)
    assert "20 records sent" in plain(out.getvalue())
    p.clear()


def test_auto_mode_never_draws_when_not_a_terminal_and_off_means_off():
    now = [0.0]
    for out, mode in ((io.StringIO(), None), (Tty(), False)):
        p = Progress(out, mode=mode, total=10, what="records sent", clock=lambda: now[0])
        now[0] += AUTO_SHOW_AFTER_S * 10
        p.update(5, 5)
        p.clear()
        assert out.getvalue() == "" and not p.enabled


def test_consume_shows_no_bar_by_default_when_the_records_go_to_a_terminal():
    assert _progress_mode(None, Tty()) is False
    assert _progress_mode(None, io.StringIO()) is None  # auto: stderr decides
    assert _progress_mode(True, Tty()) is True


def test_consume_progress_goes_to_stderr_and_the_records_stay_clean(srv):
    stdin = "".join(f"{i}\n" for i in range(60)).encode()
    assert srv.cli("produce", "orders", stdin=stdin).code == 0
    shown = srv.cli("consume", "orders", "--progress")
    assert shown.code == 0, shown.err
    assert sorted(int(v) for v in shown.out.splitlines()) == list(range(60))
    assert "\x1b" not in shown.out and "records read" in plain(shown.err)
    quiet = srv.cli("consume", "orders")  # stderr is not a terminal: no bar
    assert (quiet.code, quiet.err) == (0, "")
    assert sorted(quiet.out.splitlines()) == sorted(shown.out.splitlines())


def test_produce_progress_goes_to_stderr_only(srv):
    stdin = "".join(f"{i}\n" for i in range(50)).encode()
    shown = srv.cli("produce", "orders", "--progress", "--batch-records", "10", stdin=stdin)
    assert shown.code == 0, shown.err
    assert shown.out == "" and "records sent" in plain(shown.err)
    as_json = srv.cli("produce", "orders", "--progress", "-o", "json", stdin=stdin)
    assert '"acknowledged": 50' in as_json.out and "\x1b" not in as_json.out


def test_waiting_shows_a_spinner_when_forced_and_erases_it():
    out = io.StringIO()
    with waiting(out, mode=True, message="resetting the offsets"):
        assert "resetting the offsets" in plain(out.getvalue())
    shown = out.getvalue()
    assert "\x1b[?25h" in shown and shown.endswith("\x1b[2K")  # cursor back, line erased


def test_waiting_is_silent_when_off_not_a_terminal_or_short():
    for out, mode in ((io.StringIO(), None), (Tty(), False), (Tty(), None)):
        with waiting(out, mode=mode, message="resetting"):
            pass  # on a terminal in auto mode: over before AUTO_SHOW_AFTER_S
        assert out.getvalue() == ""
