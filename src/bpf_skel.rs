// Generated BPF skeleton (see build.rs).
include!(concat!(env!("OUT_DIR"), "/bpf_skel.rs"));
