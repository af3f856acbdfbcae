"""World predictor node: a world-action model's predictive module over the newest prefix.

Models without a world model (pi0.5) do not run this node; configuring it for one fails with a
message saying so.
"""

from __future__ import annotations

from embodied_ros.nodes.stage import StageNode


class WorldNode(StageNode):
    stage = "world"

    def setup(self) -> None:
        super().setup()
        if not self.spec.has_world_model:
            raise ValueError(f"{self.spec.architecture} has no world model; do not start the world node for it")

    def upstream_stages(self) -> tuple[str, ...]:
        return ("prefix",)

    def compute(self, step, inputs):
        return self.runtime.predict_world(inputs["prefix"])


def main(args=None) -> None:
    from embodied_ros.nodes.run import run_node

    run_node(WorldNode, args)
