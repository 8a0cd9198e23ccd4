"""Re-layout after lost ranks or hosts: which ranks keep their shard, which communicators stay."""
