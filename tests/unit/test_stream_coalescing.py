"""Streaming cost of the serving models (issue 43 item 5), outside tritonserver: both rendered models (LLM API, vLLM)
over their engine stand-ins and the Python-backend stand-in, whose calls are blocking round trips of IPC_COST_S.

When the IPC thread is behind, the text a stream gained since its last response goes out as one response (as
TensorRT-LLM's stream_interval and vLLM's output collector batch a stream's tokens); the client still gets every
token, in order, then one final response. The first token is never held back, `stream_interval` sets the fewest
tokens per later response, and a cancellation sweep makes at most CANCEL_CHECKS_PER_SWEEP round trips while every
request is still asked within a bound."""

from __future__ import annotations

import math
import time

import test_serving_model_threads as threads_tests
from test_serving_model_threads import _request, _wait

served = threads_tests.served  # the fixture: both rendered models over their stand-ins


def _texts(pb_utils, request) -> list[str]:
    out = []
    for response, _ in request.sender.responses:
        assert response.error is None, response.error.message()
        out.append({t.name(): t.as_numpy()[0] for t in response.output_tensors}["text_output"].decode())
    return out


def _finals(pb_utils, request) -> list[int]:
    return [i for i, (_, flags) in enumerate(request.sender.responses)
            if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL]


def test_a_stream_behind_the_ipc_thread_is_coalesced_in_order_and_complete(served, monkeypatch) -> None:
    model, pb_utils, _ = served
    reference = _request(pb_utils, "alpha beta gamma delta", 40)  # not streamed: the whole text in one response
    model.execute([reference])
    _wait(lambda: reference.sender.final.is_set())
    (expected,) = _texts(pb_utils, reference)
    monkeypatch.setattr(pb_utils, "IPC_COST_S", 0.03)  # three engine steps per Triton round trip
    stream = _request(pb_utils, "alpha beta gamma delta", 40, stream=True)
    model.execute([stream])
    _wait(lambda: stream.sender.final.is_set(), 30)
    texts = _texts(pb_utils, stream)
    assert "".join(texts).split() == expected.split() and len(expected.split()) == 40, "every token, in order"
    assert _finals(pb_utils, stream) == [len(texts) - 1], "one final response, the last"
    assert len(texts) < 20, f"{len(texts)} responses for 40 tokens: the tokens that waited were not coalesced"
    assert max(len(t.split()) for t in texts[:-1]) >= 2


def test_the_first_token_is_sent_at_once_and_stream_interval_batches_the_rest(served, monkeypatch) -> None:
    model, pb_utils, _ = served
    monkeypatch.setattr(pb_utils, "IPC_COST_S", 0.0005)  # the IPC thread keeps up: nothing joins the first token
    model.stream_interval = 5  # config.pbtxt stream_interval
    stream = _request(pb_utils, "one two three", 23, stream=True)
    start = time.monotonic()
    model.execute([stream])
    _wait(lambda: stream.sender.final.is_set())
    texts = _texts(pb_utils, stream)
    assert " ".join(texts).split() == ("one two three " * 8).split()[:23]
    # One token, or two when this machine is busy (the engine thread got ahead of the sender): never an interval's.
    assert len(texts[0].split()) < model.stream_interval, f"the first response waited for more tokens: {texts[0]!r}"
    # engine steps are 10 ms: the first token is out long before the second interval is full
    assert stream.sender.sent_at[0] - start < 0.5 * (stream.sender.sent_at[-1] - start)
    assert all(len(t.split()) >= 5 for t in texts[1:-1]), f"partial responses under stream_interval: {texts}"
    assert 3 <= len(texts) <= 6, texts


def test_a_cancellation_sweep_is_bounded_and_every_request_is_still_asked(served) -> None:
    model, pb_utils, _ = served
    names = type(model).initialize.__globals__
    per_sweep, poll_s = names["CANCEL_CHECKS_PER_SWEEP"], names["CANCEL_POLL_S"]
    n = 2 * per_sweep + 20  # two run (SLOTS), the rest wait for a slot: all are in flight, all are asked
    requests = [_request(pb_utils, f"request {i}", 500, stream=True) for i in range(n)]
    model.execute(requests)
    try:
        _wait(lambda: all(r.sender.responses for r in requests[:2]))
        sweeps_before = model.sweeps
        checks_before = sum(1 for call, _ in pb_utils.CALLS if call == "is_cancelled")
        _wait(lambda: model.sweeps - sweeps_before >= 3, 30)
        checks = sum(1 for call, _ in pb_utils.CALLS if call == "is_cancelled") - checks_before
        sweeps = model.sweeps - sweeps_before  # read after the checks: each counted check is of a sweep counted here,
        # of the one running when counting began, or of the one running when it ended: at most 2 partial sweeps
        assert checks <= (sweeps + 2) * per_sweep, f"{checks} is_cancelled calls in {sweeps} sweeps"
        last = requests[-1]  # last in arrival order: asked in the last sweep of a round
        cancelled_at = time.monotonic()
        last.cancelled = True
        _wait(lambda: last.sender.final.is_set(), 10)
        took = time.monotonic() - cancelled_at
        bound = math.ceil(n / per_sweep) * (poll_s + per_sweep * pb_utils.IPC_COST_S) + 1.0
        assert took < bound, f"cancellation noticed after {took:.2f} s (bound {bound:.2f} s)"
        (response, _), = last.sender.responses
        assert response.error is not None and response.error.code() == pb_utils.TritonError.CANCELLED
    finally:  # end them all, so finalize does not wait out the drain bound
        for r in requests:
            r.cancelled = True
    _wait(lambda: all(r.sender.final.is_set() for r in requests), 30)
    assert all(len(_finals(pb_utils, r)) == 1 for r in requests)
