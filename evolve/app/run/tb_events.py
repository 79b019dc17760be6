"""TensorBoard's event files, written without TensorFlow or torch's SummaryWriter: the records
(tensorboard's own protocol buffers) framed as TFRecords, each with its masked CRC-32C, and a file's
length up to its last whole record at or before a step (what a resume keeps). :mod:`evolve.app.run.tracking`
decides what to write and when.
"""
from __future__ import annotations

import math
import struct
import time
from typing import Callable


class Events:
    """TensorBoard's event records (tensorboard's protocol buffers, framed as TFRecords): each method returns the bytes to write."""

    @staticmethod
    def imports():
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
        from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
        from tensorboard.plugins.text import plugin_data_pb2 as text_pb2

        return event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, api_pb2, metadata, plugin_data_pb2, text_pb2

    def __init__(self):
        (self.event_pb2, self.summary_pb2, self.tensor_pb2, self.tensor_shape_pb2, self.api_pb2, self.hp_metadata, self.hp_data,
         self.text_data) = self.imports()
        self.Event, self.Summary = self.event_pb2.Event, self.summary_pb2.Summary
        self.crc = masked_crc32c_function()

    def framed(self, event) -> bytes:
        """One TFRecord: length, its checksum, the event, its checksum."""
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        return header + struct.pack("<I", self.crc(header)) + data + struct.pack("<I", self.crc(data))

    def file_version(self) -> bytes:
        return self.framed(self.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def session_log_start(self, step: int) -> bytes:
        """A SessionLog START at ``step``: TensorBoard's Python loader drops the points it holds from that step on
        (the first START of a run drops nothing)."""
        event = self.Event(wall_time=time.time(), step=step)
        event.session_log.status = self.event_pb2.SessionLog.START
        return self.framed(event)

    def kept_length(self, path: str, last: int) -> int | None:
        """How much of the event file ``path`` to keep: its records up to the first at a step past ``last``, or to one
        that the file's end cuts short; None: all of it (also from a record whose framing is not a TFRecord's, which
        ends the reading: not evens' to judge)."""
        at, parse, crc = 0, self.Event.FromString, self.crc
        with open(path, "rb") as f:
            while header := f.read(12):
                if len(header) < 12:
                    return at
                if struct.unpack_from("<I", header, 8)[0] != crc(header[:8]):
                    return None
                size = struct.unpack_from("<Q", header)[0]
                record = f.read(size + 4)
                if len(record) < size + 4:
                    return at
                try:
                    step = parse(record[:size]).step
                except Exception:  # (protobuf's DecodeError)
                    return None
                if step > last:
                    return at
                at += 12 + size + 4
        return None

    def scalars(self, step: int, when: float, values: dict) -> bytes:
        """One event holding every finite value (a failed evaluation's -inf fitness is left out)."""
        event = self.Event(wall_time=when, step=step)
        add = event.summary.value.add
        for tag, v in values.items():
            if math.isfinite(v):
                value = add()  # (3x faster than Summary.Value(tag=..., simple_value=...) for each)
                value.tag, value.simple_value = tag, v
        return self.framed(event)

    def curve(self, when: float, tag: str, values: list[float]) -> bytes:
        """One event per step, ``values[0]`` at step 1: one event changed and framed again for each (a third of the time of new ones)."""
        event = self.Event(wall_time=when)
        value = event.summary.value.add()
        value.tag = tag
        parts = []
        for step, v in enumerate(values, 1):
            if math.isfinite(v):
                event.step, value.simple_value = step, v
                parts.append(self.framed(event))
        return b"".join(parts)

    def _hparams(self, when: float, tag: str, **data) -> bytes:
        meta = self.hp_metadata
        plugin_data = meta.create_summary_metadata(self.hp_data.HParamsPluginData(**data))
        value = self.Summary.Value(tag=tag, metadata=plugin_data, tensor=meta.NULL_TENSOR)
        return self.framed(self.Event(wall_time=when, summary=self.Summary(value=[value])))

    def session_start(self, when: float, hparams: dict) -> bytes:
        info = self.hp_data.SessionStartInfo(start_time_secs=when)
        for name, v in hparams.items():
            if isinstance(v, bool):
                info.hparams[name].bool_value = v
            elif isinstance(v, (int, float)):
                info.hparams[name].number_value = v
            else:
                info.hparams[name].string_value = str(v)
        return self._hparams(when, self.hp_metadata.SESSION_START_INFO_TAG, session_start_info=info)

    def session_end(self, when: float, succeeded: bool) -> bytes:
        status = self.api_pb2.STATUS_SUCCESS if succeeded else self.api_pb2.STATUS_FAILURE
        info = self.hp_data.SessionEndInfo(status=status, end_time_secs=when)
        return self._hparams(when, self.hp_metadata.SESSION_END_INFO_TAG, session_end_info=info)

    def text(self, step: int, when: float, tag: str, markdown: str) -> bytes:
        meta = self.summary_pb2.SummaryMetadata(plugin_data=self.summary_pb2.SummaryMetadata.PluginData(
            plugin_name="text", content=self.text_data.TextPluginData(version=0).SerializeToString()))
        scalar = self.tensor_shape_pb2.TensorShapeProto()  # one markdown text, not a table of them
        tensor = self.tensor_pb2.TensorProto(dtype="DT_STRING", string_val=[markdown.encode()], tensor_shape=scalar)
        value = self.Summary.Value(tag=tag, metadata=meta, tensor=tensor)
        return self.framed(self.Event(wall_time=when, step=step, summary=self.Summary(value=[value])))


def masked_crc32c_function() -> Callable[[bytes], int]:
    """TFRecord's masked CRC-32C: google-crc32c's C code if installed (the extra's), else tensorboard's pure Python (slow)."""
    try:
        import google_crc32c

        if google_crc32c.implementation != "c":
            raise ImportError
    except ImportError:
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

        return masked_crc32c
    value = google_crc32c.value

    def masked(data: bytes) -> int:
        crc = value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    return masked
