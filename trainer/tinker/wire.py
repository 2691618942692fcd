"""The Tinker SDK's binary wire format, both ways, using the SDK's own generated protobuf
classes (`tinker.proto.tinker_public_pb2`), so the server and the client can never disagree
on a field number.

In: a `forward_backward` body (protobuf, maybe zstd-compressed) becomes a `FwdBwdCall` of
plain Python and numpy. Out: loss outputs and samples become the protobuf bytes that the
SDK's `retrieve_future` asks for with `Accept: application/x-protobuf` (it accepts nothing
else for these two result types).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from skyhub.trainer.tinker.exceptions import BodyTooLarge, Unsupported

MAX_BODY = 128 << 20  # default limit of a request body, compressed or decompressed


@dataclass
class WireDatum:
    tokens: list[int]
    inputs: dict[str, np.ndarray]


@dataclass
class FwdBwdCall:
    model_id: str
    seq_id: int
    loss_fn: str
    forward_only: bool
    data: list[WireDatum]
    config: dict[str, float | str] = field(default_factory=dict)
    problem: str | None = None  # what this server cannot do with a well-formed request


def _pb() -> Any:
    from tinker.proto import tinker_public_pb2

    return tinker_public_pb2


def _np_dtype(pb: Any, dtype: int) -> np.dtype:
    table = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64,
             pb.DTYPE_INT32: np.int32}
    if dtype not in table:
        raise Unsupported(f"tensor dtype {dtype} (send float32 or int64 tensors)")
    return np.dtype(table[dtype])


def _tensor(pb: Any, msg: Any, name: str, budget: list[int]) -> np.ndarray:
    """One loss input as a dense array. `budget` holds the bytes the request's tensors may
    still take: the shape is the client's word, and a sparse tensor's would otherwise size
    the allocation below (and its row loop) however the client liked."""
    dtype = _np_dtype(pb, msg.dtype)
    shape = list(msg.shape)
    size = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if any(d < 0 for d in shape) or size > budget[0]:
        raise ValueError(f"loss input {name!r}: shape {shape[:8]} takes this request past "
                         "the server's limit on tensor bytes (--max-body-mb)")
    budget[0] -= size
    if msg.HasField("sparse_csr"):
        if len(shape) != 2:
            raise Unsupported(f"loss input {name!r}: a sparse tensor must be 2-D")
        csr = msg.sparse_csr
        values = np.frombuffer(csr.values, dtype=dtype)
        crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(csr.col_indices, dtype=np.int64)
        if len(crow) != shape[0] + 1 or len(col) != len(values) or (len(crow) and (
                crow[0] != 0 or crow[-1] != len(values) or np.any(np.diff(crow) < 0))) \
                or (len(col) and (col.min() < 0 or col.max() >= shape[1])):
            raise ValueError(f"loss input {name!r}: malformed sparse CSR tensor")
        dense = np.zeros(shape, dtype=dtype)
        for row in range(shape[0]):
            lo, hi = int(crow[row]), int(crow[row + 1])
            dense[row, col[lo:hi]] = values[lo:hi]
        return dense
    arr = np.frombuffer(msg.dense, dtype=dtype)
    return arr.reshape(shape) if shape else arr


def decompress_zstd(body: bytes, limit: int) -> bytes:
    """`body` decompressed, at most `limit` bytes (`BodyTooLarge` past it). Read as a stream:
    `ZstdDecompressor.decompress` allocates whatever size the frame header declares, so a
    2 KB body could ask for gigabytes."""
    import io

    import zstandard

    out = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read(limit + 1)
    if len(out) > limit:
        raise BodyTooLarge(f"the zstd body decompresses to more than {limit} bytes, this "
                           "server's limit (--max-body-mb); send smaller batches")
    return out


def decode_forward_backward(body: bytes, encoding: str | None,
                            limit: int = MAX_BODY) -> FwdBwdCall:
    """Parse the body of `POST /api/v1/forward_backward`: raises `ValueError` if it is not
    a ForwardBackwardRequest (`BodyTooLarge` if it decompresses past `limit` bytes); what
    this server cannot do (image or audio chunks, a dtype) is the call's `problem`, for its
    future to fail with."""
    if encoding == "zstd":
        body = decompress_zstd(body, limit)
    elif encoding not in (None, "", "identity"):
        raise ValueError(f"unsupported Content-Encoding {encoding!r}")
    pb = _pb()
    msg = pb.ForwardBackwardRequest()
    msg.ParseFromString(body)
    config: dict[str, float | str] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for k, v in msg.loss_fn_config_v2.items():
        config[k] = v.text if v.WhichOneof("value") == "text" else float(v.number)
    try:
        budget = [limit]
        data, problem = [_datum(pb, d, budget) for d in msg.data], None
    except Unsupported as e:
        data, problem = [], str(e)
    return FwdBwdCall(msg.model_id, int(msg.seq_id), msg.loss_fn, bool(msg.forward_only),
                      data, config, problem)


def _datum(pb: Any, d: Any, budget: list[int]) -> WireDatum:
    tokens: list[int] = []
    for chunk in d.model_input:
        kind = chunk.WhichOneof("chunk")
        if kind is None:  # an empty token chunk
            continue
        if kind != "encoded_text":
            raise Unsupported(f"model input chunks of type {kind!r}: this server trains "
                              "text models; send token chunks (ModelInput.from_ints)")
        tokens += np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist()
    inputs = {name: _tensor(pb, t, name, budget) for name, t in d.loss_fn_inputs.items()}
    return WireDatum(tokens, inputs)


def encode_forward_backward(outputs: list[dict[str, np.ndarray]],
                            metrics: dict[str, float]) -> bytes:
    """ForwardBackwardOutput: one ArrayRecord holding every datum's outputs, each field a
    batched tensor (concatenated data plus byte offsets per datum)."""
    pb = _pb()
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    for k, v in metrics.items():
        msg.metrics[k] = float(v)
    record = msg.loss_fn_outputs.add()
    record.type_tag = "ArrayRecord"
    record.num_datums = len(outputs)
    for name in (outputs[0] if outputs else {}):
        arrays = [np.ascontiguousarray(o[name], dtype=np.float32).reshape(-1) for o in outputs]
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([a.nbytes for a in arrays])
        bt = record.fields[name]
        bt.dtype = pb.DTYPE_FLOAT32
        bt.data = b"".join(a.tobytes() for a in arrays)
        bt.offsets = offsets.tobytes()
    return msg.SerializeToString()


def encode_sample(sequences: list[tuple[list[int], list[float], str]],
                  prompt_logprobs: list[float] | None) -> bytes:
    """SampleResponse from (tokens, logprobs, "stop"|"length") per sequence; prompt logprobs
    NaN where there are none (the first token)."""
    pb = _pb()
    msg = pb.SampleResponse()
    for tokens, logprobs, stop in sequences:
        seq = msg.sequences.add()
        seq.tokens = np.asarray(tokens, dtype=np.int32).tobytes()
        seq.logprobs = np.asarray(logprobs, dtype=np.float32).tobytes()
        seq.stop_reason = pb.STOP_REASON_STOP if stop == "stop" else pb.STOP_REASON_LENGTH
    if prompt_logprobs is not None:
        msg.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return msg.SerializeToString()
