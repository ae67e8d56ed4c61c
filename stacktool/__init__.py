"""The workbench for the torch.attn patch stack: materialize, build, export, test."""
