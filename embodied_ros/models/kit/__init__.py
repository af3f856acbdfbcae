"""What every model family shares, one module a concern: `configs` (config fields, bundle sections,
spec), `flow_vla` (a flow-matching VLA runtime's stage helpers), `records` (recorded cases, reference
records, verification), `lerobot_save` (reading a LeRobot save, writing its bundle). A family's own
files hold only what differs."""
