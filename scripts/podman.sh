# Sourced by scripts/image.sh and tests/containers.py's shell steps: podman as it
# runs on this kind of machine (docs/design.md §12): runc (crun fails on hybrid cgroups),
# cgroupfs (no systemd), explicit ulimits (no CAP_SYS_RESOURCE in the sandbox).
stk_podman() {
  podman --cgroup-manager=cgroupfs --runtime runc "$@"
}
STK_ULIMITS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
