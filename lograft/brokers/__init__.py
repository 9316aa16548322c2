"""A broker: replica manager, partition state, replica fetcher, group coordinator."""
