"""Action head node: every action step, the flow solver over the newest prefix (and world prediction).

With real-time chunking (`rtc.enabled`) each chunk continues the one it published last
(deploy/continuation.py), solved while the controller still executes that one."""

from __future__ import annotations

from embodied_ros.deploy.continuation import ChunkContinuer, DelayEstimate
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.node_infra.topics import ACTION_CHUNK
from embodied_ros.node_infra.transport import chunk_to_msg
from embodied_ros.msg import ActionChunk
from embodied_ros.nodes.stage import StageNode


class ActionNode(StageNode):
    stage = "action"
    runs_on_unchanged_input = True

    def setup(self) -> None:
        super().setup()
        settings = self.config.rtc
        self.continuer = None
        if settings.enabled:
            if not self.spec.real_time_chunking:
                raise ValueError(f"rtc.enabled: the {self.spec.architecture} runtime has no real-time chunking")
            delay = DelayEstimate(settings.delay_rows if settings.delay == "fixed" else None, settings.delay_window)
            self.continuer = ChunkContinuer(settings.settings, delay)

    def make_output_publisher(self):
        return self.lifecycle_publisher(ActionChunk, ACTION_CHUNK, self.drive.stage_qos())

    def compute(self, step, inputs):
        noise_index = self.drive.noise_index(step, self.sequence)
        noise = stage_noise(self.config.stages.seed_for(self.spec), "action", noise_index, self.spec.noise_shape)
        if self.continuer is None:
            chunk = self.runtime.act(inputs["prefix"], inputs.get("world"), noise)
        else:
            continuation = self.continuer.continuation(inputs["prefix"].stamp_ns)
            chunk = self.runtime.act(inputs["prefix"], inputs.get("world"), noise, continuation)
        if getattr(chunk, "fallback", False):  # a head's stand-in (pi0-FAST: undecodable tokens) never reaches the arm
            raise ValueError(f"no chunk: {chunk.problem}")
        return chunk

    def publish_result(self, step, sequence, result, now_ns) -> None:
        self.output_publisher.publish(chunk_to_msg(result, now_ns))
        if self.continuer is not None and result is not None:
            self.continuer.published(result, now_ns + self.drive.landing_delay_ns)


def main(args=None) -> None:
    from embodied_ros.nodes.run import run_node

    run_node(ActionNode, args)


if __name__ == "__main__":
    main()
