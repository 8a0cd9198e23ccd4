"""Megatron's pipeline split: which decoder layers each (stage, virtual chunk) builds."""
