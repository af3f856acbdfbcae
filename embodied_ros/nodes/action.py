"""Action head node: every action step, the flow solver over the newest prefix (and world prediction)."""

from __future__ import annotations

from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.graph.topics import ACTION_CHUNK, stage_qos
from embodied_ros.graph.transport import chunk_to_msg
from embodied_ros.msg import ActionChunk
from embodied_ros.nodes.stage import StageNode


class ActionNode(StageNode):
    stage = "action"
    runs_on_unchanged_input = True

    def upstream_stages(self) -> tuple[str, ...]:
        return ("prefix", "world") if self.spec.has_world_model else ("prefix",)

    def make_output_publisher(self):
        return self.lifecycle_publisher(ActionChunk, ACTION_CHUNK, stage_qos(self.lockstep))

    def compute(self, step, inputs):
        noise_index = step if self.lockstep else self.sequence + 1
        noise = stage_noise(self.config.stages.noise_seed, "action", noise_index, self.spec.noise_shape)
        return self.runtime.act(inputs["prefix"], inputs.get("world"), noise)

    def publish_result(self, step, sequence, result, now_ns) -> None:
        self.output_publisher.publish(chunk_to_msg(result, now_ns))


def main(args=None) -> None:
    from embodied_ros.nodes.run import run_node

    run_node(ActionNode, args)


if __name__ == "__main__":
    main()
