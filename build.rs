// Compiles the BPF side (src/bpf/*.bpf.c, linked into one object) and
// generates its skeleton and the bindings of src/bpf/intf.h.
fn main() {
    scx_cargo::BpfBuilder::new()
        .expect("BPF build setup failed: set BPF_CLANG to clang >= 18 (e.g. /usr/bin/clang-19)")
        .enable_intf("src/bpf/intf.h", "bpf_intf.rs")
        .enable_skel("src/bpf/main.bpf.c", "bpf")
        .add_source("src/bpf/classify.bpf.c")
        .add_source("src/bpf/budget.bpf.c")
        .add_source("src/bpf/cpu_quality.bpf.c")
        .add_source("src/bpf/placement.bpf.c")
        .add_source("src/bpf/fair.bpf.c")
        .compile_link_gen()
        .expect("BPF build failed");
}
