"""Readers of the host: unified memory from /proc/meminfo, the page-cache flush, the GPU."""
