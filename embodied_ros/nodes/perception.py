"""Perception encoder node: the vision tower over the newest observation's images."""

from __future__ import annotations

from embodied_ros.nodes.stage import StageNode


class PerceptionNode(StageNode):
    stage = "perception"

    def compute(self, step, inputs):
        return self.runtime.encode(inputs["observation"])


def main(args=None) -> None:
    from embodied_ros.nodes.run import run_node

    run_node(PerceptionNode, args)


if __name__ == "__main__":
    main()
