"""Write a NEW rosbag2 bag (format version 9, MCAP or sqlite3) with `rosbags`.

Messages may be rosbags message objects (from `embodied_ros.replay.messages`), rclpy messages
(serialized with rclpy, whose CDR is byte-identical), or already serialized CDR bytes. Topics are
registered on first use with the typestore's definition and type hash.
"""

from __future__ import annotations

from pathlib import Path

from embodied_ros.replay import messages as m

STORAGES = ("mcap", "sqlite3")


class BagWriter:
    def __init__(self, path: str | Path, storage: str = "mcap") -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {', '.join(STORAGES)}, got {storage!r}")
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"{self.path} exists; bags are only ever written new (choose another --out)")
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = Writer(self.path, version=9, storage_plugin=plugin)
        self._connections: dict[str, object] = {}
        self._types: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def __enter__(self) -> BagWriter:
        self._writer.open()
        return self

    def __exit__(self, *exc) -> None:
        self._writer.close()

    def write(self, topic: str, msgtype: str, stamp: int, message) -> None:
        """Append one message at log time `stamp` (ns)."""
        connection = self._connection(topic, msgtype)
        self._writer.write(connection, int(stamp), self._serialize(message, msgtype))
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def _connection(self, topic: str, msgtype: str):
        if topic not in self._connections:
            self._connections[topic] = self._writer.add_connection(topic, msgtype, typestore=m.typestore())
            self._types[topic] = msgtype
        elif self._types[topic] != msgtype:
            raise ValueError(f"topic {topic} already carries {self._types[topic]}, cannot also write {msgtype}")
        return self._connections[topic]

    @staticmethod
    def _serialize(message, msgtype: str) -> bytes | memoryview:
        if isinstance(message, (bytes, bytearray, memoryview)):
            return message
        if getattr(message, "__msgtype__", None) is not None:  # a rosbags message object
            return m.typestore().serialize_cdr(message, msgtype)
        from rclpy.serialization import serialize_message

        return serialize_message(message)
