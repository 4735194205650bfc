"""A word-level stand-in LLM behind the serving models' Triton interface (tests only).

A "token" is a whitespace-separated word. The reply is words from a fixed vocabulary, one per step;
`stop_words` end the reply before the matching word; `max_tokens` bounds it (finish_reason "length").
"""

import numpy as np
import triton_python_backend_utils as pb_utils

VOCAB = ["alpha", "beta", "gamma", "delta", "omega"]


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    value = tensor.as_numpy().reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else value.item()


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                self._generate(request, sender)
            except Exception as exc:  # noqa: BLE001
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _generate(self, request, sender):
        prompt = _scalar(request, "text_input", "")
        max_tokens = int(_scalar(request, "max_tokens", 16))
        stream = bool(_scalar(request, "stream", False))
        stops_tensor = pb_utils.get_input_tensor_by_name(request, "stop_words")
        stops = [s.decode() for s in stops_tensor.as_numpy().reshape(-1)] if stops_tensor is not None else []
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        n_in = len(prompt.split())
        words, finish = [], "length"
        for i in range(max_tokens):
            word = VOCAB[(n_in + i) % len(VOCAB)]
            if word in stops:
                finish = "stop"
                break
            words.append(word)
        pieces = [" " + w for w in words] if stream else ["".join(" " + w for w in words)]
        if not pieces:
            pieces = [""]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            outputs = [
                pb_utils.Tensor("text_output", np.array([piece.encode()], dtype=np.object_)),
                pb_utils.Tensor("finish_reason", np.array([finish.encode() if last else b""], dtype=np.object_)),
                pb_utils.Tensor("num_input_tokens", np.array([n_in], dtype=np.int32)),
                pb_utils.Tensor("num_output_tokens", np.array([len(words) if last or not stream else i + 1], dtype=np.int32)),
            ]
            sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
