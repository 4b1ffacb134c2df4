"""What a run reports: TensorBoard streams, the report and its plots."""
