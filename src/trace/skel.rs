// Generated skeleton of the probes-only trace object (see build.rs).
include!(concat!(env!("OUT_DIR"), "/trace_skel.rs"));
