"""World predictor node: a world-action model's predictive module over the newest prefix.

The node holds the model's episode (`runtime.world_episode()`: for LingBot-VA the KV pool, the VAE
streams per camera, the observed frames for the keyframes and the previous chunk's actions) from run
to run; every prefix output's frames reach it, also on the steps it does not run. Its initial noise
comes from `pipeline/noise.py: stage_noise(seed, "world", step, shape)`, as the action head's does,
so a lock-step run equals direct calls of the runtime given the same noises. With
`stages.world_frames_every` N > 0 it also publishes, after every Nth prediction, the prediction's
last frame per camera decoded (`runtime.world_frames`) as sensor_msgs/Image on
embodied/world_frames/<camera>, stamped with the prediction's observation.

With a model that has no world model (pi0.5) the node configures and activates but stays idle:
it subscribes to nothing, runs nothing and says so on /diagnostics; the action head then reads
the prefix alone. Graphs started by `embodied-ros up` leave it out for such models.
"""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticStatus
from sensor_msgs.msg import Image

from embodied_ros.inputs.image import array_to_image
from embodied_ros.node_infra.topics import world_frames_topic
from embodied_ros.nodes.stage import StageNode
from embodied_ros.pipeline.noise import stage_noise


class WorldNode(StageNode):
    stage = "world"

    def upstream_stages(self) -> tuple[str, ...]:
        return super().upstream_stages() if self.spec.has_world_model else ()

    def start(self) -> None:
        if self.spec.has_world_model:
            super().start()
        else:
            self.get_logger().info(f"{self.spec.architecture} has no world model: this node stays idle")

    def on_step(self, step: int) -> None:
        if self.spec.has_world_model:
            super().on_step(step)

    def setup(self) -> None:
        super().setup()
        self.episode = self.runtime.world_episode() if self.spec.has_world_model else None
        self.frames_every = self.config.stages.world_frames_every if self.spec.has_world_model else 0
        self.frame_publishers = {}
        if self.frames_every:
            if not hasattr(self.runtime, "world_frames"):
                raise ValueError(f"stages.world_frames_every: the {self.spec.architecture} runtime decodes no frames")
            self.frame_publishers = {camera: self.lifecycle_publisher(Image, world_frames_topic(camera),
                                                                      self.drive.stage_qos())
                                     for camera in self.spec.camera_names}

    def publish_result(self, step, sequence, result, now_ns) -> None:
        super().publish_result(step, sequence, result, now_ns)
        if result is None or not self.frames_every or (sequence - 1) % self.frames_every:
            return
        try:
            frames = self.runtime.world_frames(result)
        except Exception as error:  # a failing preview is reported; the prediction went out
            self.stats.record_error(f"decoding the predicted frames: {type(error).__name__}: {error}")
            return
        for camera, image in frames.items():
            self.frame_publishers[camera].publish(array_to_image(image, "rgb8", result.stamp_ns, camera))

    def upstream_arrived(self, name, output) -> None:
        if output is not None and self.episode is not None:
            self.runtime.observe_world(self.episode, output)

    def compute(self, step, inputs):
        shape = self.spec.world_noise_shape
        noise_index = self.drive.noise_index(step, self.sequence)
        noise = None if shape is None else stage_noise(self.config.stages.seed_for(self.spec), "world", noise_index, shape)
        return self.runtime.predict_world(inputs["prefix"], noise, self.episode)

    def diagnostic_status(self) -> DiagnosticStatus:
        status = super().diagnostic_status()
        if self.active and not self.spec.has_world_model and not self.stats.problem:
            status.level, status.message = DiagnosticStatus.OK, "idle: the model has no world model"
        return status


def main(args=None) -> None:
    from embodied_ros.nodes.run import run_node

    run_node(WorldNode, args)


if __name__ == "__main__":
    main()
