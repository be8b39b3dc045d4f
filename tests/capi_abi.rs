//! rpma's C ABI (crate rpma-capi, built by `harness/capi-build` into
//! target/capi/lib) against C librpma's own `librpma.h`, without a device:
//! * every function the header declares is exported, under librpma's symbol
//!   version `LIBRPMA_1.0`, and nothing else is;
//! * each exported function's Rust signature matches the header's prototype
//!   (argument count, and each argument's C type class: int, uint32_t,
//!   size_t, bool, pointer depth, function pointer);
//! * tests/c/capi_abi.c, compiled against the header, prints the same lines
//!   on C librpma and on rpma's library: the same binary switched with
//!   `LD_LIBRARY_PATH` alone, one linked to rpma's shared library, and one
//!   linked statically to `librpma.a`.
//!
//! The header is `/usr/include/librpma.h` (Debian's librpma-dev), or
//! `$RPMA_HEADER`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo().join("target"))
}

/// The built C ABI, failing loudly when it is missing or older than its sources.
fn lib_dir() -> PathBuf {
    let dir = target_dir().join("capi").join("lib");
    let so = dir.join("librpma.so.0");
    let built = std::fs::metadata(&so)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: run harness/capi-build (harness/test does)", so.display()));
    for d in ["rpma-capi/src", "rpma/src", "rpma/src/conn", "rpma/src/cq", "rpma/src/mr", "rpma/src/inflight"] {
        for f in std::fs::read_dir(repo().join(d)).unwrap().flatten() {
            let m = f.metadata().unwrap().modified().unwrap();
            assert!(m <= built, "{} is older than {}: run harness/capi-build again", so.display(), f.path().display());
        }
    }
    dir
}

fn header() -> String {
    let path = std::env::var("RPMA_HEADER").unwrap_or_else(|_| "/usr/include/librpma.h".into());
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (harness/install-deps installs librpma-dev)"))
}

/// The header without comments and preprocessor lines.
fn strip_c(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(i) = rest.find("/*") {
        out += &rest[..i];
        rest = rest[i + 2..].find("*/").map_or("", |j| &rest[i + 2 + j + 2..]);
    }
    out += rest;
    out.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n")
}

/// A C parameter or return type as its ABI class.
fn c_class(param: &str) -> String {
    let p = param.replace('*', " * ").replace('[', " [ ");
    let toks: Vec<&str> = p.split_whitespace().filter(|t| *t != "const").collect();
    let depth = toks.iter().filter(|t| **t == "*" || **t == "[").count();
    let base: Vec<&str> = toks.iter().copied().take_while(|t| *t != "*" && *t != "[").collect();
    // Every parameter of librpma.h is named: its last word is the name.
    let base = if depth == 0 { &base[..base.len().saturating_sub(1)] } else { &base[..] };
    if base == ["rpma_log_function"] && depth == 1 {
        return "fnptr".into();
    }
    if depth > 0 {
        return format!("ptr{depth}");
    }
    match base {
        ["int"] | ["enum", _] => "int".into(),
        ["uint32_t"] => "u32".into(),
        ["size_t"] => "usize".into(),
        ["bool"] => "bool".into(),
        other => panic!("unknown C type {other:?} in {param:?}"),
    }
}

/// A Rust parameter or return type as its ABI class.
fn rust_class(ty: &str) -> String {
    let ty = ty.trim();
    if ty.starts_with("Option<") && ty.contains("LogFunction") {
        return "fnptr".into();
    }
    let depth = ty.matches("*mut").count() + ty.matches("*const").count();
    if depth > 0 {
        return format!("ptr{depth}");
    }
    match ty {
        "c_int" => "int".into(),
        "u32" => "u32".into(),
        "usize" => "usize".into(),
        "bool" => "bool".into(),
        other => panic!("unknown Rust type {other:?}"),
    }
}

type Sigs = BTreeMap<String, (String, Vec<String>)>;

/// name -> (return class, parameter classes), from the header.
fn header_sigs() -> Sigs {
    let mut sigs = Sigs::new();
    for stmt in strip_c(&header()).split(';') {
        let s = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
        let (ret, rest) = if let Some(r) = s.strip_prefix("int ") {
            ("int", r)
        } else if let Some(r) = s.strip_prefix("const char *") {
            ("ptr1", r)
        } else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(open) = rest.find('(') else { continue };
        let name = &rest[..open];
        if !name.starts_with("rpma_") || !rest.ends_with(')') {
            continue;
        }
        let params = &rest[open + 1..rest.len() - 1];
        let classes = params.split(',').map(c_class).collect();
        sigs.insert(name.to_string(), (ret.to_string(), classes));
    }
    sigs
}

/// name -> (return class, parameter classes), from rpma-capi's sources
/// (the `cfg_field!` and `conn_get!` macros expanded by their shapes).
fn rust_sigs() -> Sigs {
    let mut sigs = Sigs::new();
    for f in std::fs::read_dir(repo().join("rpma-capi/src")).unwrap().flatten() {
        let src = std::fs::read_to_string(f.path()).unwrap();
        for part in src.split("extern \"C\" fn ").skip(1) {
            let open = part.find('(').unwrap();
            let name = part[..open].trim();
            if !name.starts_with("rpma_") {
                continue;
            }
            let close = open + part[open..].find(')').unwrap();
            let params: Vec<String> = part[open + 1..close]
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(|p| rust_class(p.split_once(':').unwrap().1))
                .collect();
            let after = &part[close + 1..];
            let ret = after.trim_start().strip_prefix("->").unwrap().split('{').next().unwrap();
            sigs.insert(name.to_string(), (rust_class(ret), params));
        }
        for part in src.split("cfg_field!(").skip(1).filter(|p| !p.starts_with('$')) {
            let a: Vec<&str> = part.splitn(5, ',').map(str::trim).collect();
            sigs.insert(a[1].into(), ("int".into(), vec!["ptr1".into(), rust_class(a[3])]));
            sigs.insert(a[2].into(), ("int".into(), vec!["ptr1".into(), rust_class(&format!("*mut {}", a[3]))]));
        }
        for part in src.split("conn_get!(").skip(1).filter(|p| !p.starts_with('$')) {
            let a: Vec<&str> = part.splitn(3, ',').map(str::trim).collect();
            sigs.insert(a[0].into(), ("int".into(), vec!["ptr1".into(), rust_class(&format!("*mut {}", a[1]))]));
        }
    }
    sigs
}

#[test]
fn every_header_function_is_exported_under_librpma_1_0_and_nothing_else() {
    let want: Vec<String> = header_sigs().into_keys().collect();
    assert_eq!(want.len(), 84, "librpma.h declares 84 functions");
    let so = lib_dir().join("librpma.so.0");
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(&so).output().expect("nm (binutils)");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut got = Vec::new();
    for line in text.lines() {
        let sym = line.split_whitespace().last().unwrap_or("");
        if sym == "LIBRPMA_1.0" {
            continue;
        }
        let name = sym.strip_suffix("@@LIBRPMA_1.0").unwrap_or_else(|| panic!("{sym} is exported outside LIBRPMA_1.0"));
        got.push(name.to_string());
    }
    got.sort();
    assert_eq!(got, want, "exported functions vs librpma.h");
    let map = std::fs::read_to_string(repo().join("rpma-capi/librpma.map")).unwrap();
    let mut listed: Vec<String> = map
        .lines()
        .filter_map(|l| l.trim().strip_suffix(';'))
        .filter(|l| l.starts_with("rpma_"))
        .map(String::from)
        .collect();
    listed.sort();
    assert_eq!(listed, want, "rpma-capi/librpma.map vs librpma.h");
    let soname = Command::new("objdump").arg("-p").arg(&so).output().unwrap();
    assert!(String::from_utf8_lossy(&soname.stdout).contains("SONAME               librpma.so.0"));
}

#[test]
fn every_signature_matches_the_header() {
    let (c, r) = (header_sigs(), rust_sigs());
    assert_eq!(c.len(), 84);
    let mut wrong = Vec::new();
    for (name, sig) in &c {
        match r.get(name) {
            Some(rs) if rs == sig => {}
            other => wrong.push(format!("{name}: librpma.h {sig:?}, rpma-capi {other:?}")),
        }
    }
    for name in r.keys().filter(|n| !c.contains_key(*n)) {
        wrong.push(format!("{name}: exported by rpma-capi, not in librpma.h"));
    }
    assert!(wrong.is_empty(), "signature mismatches:\n{}", wrong.join("\n"));
}

/// Builds tests/c/capi_abi.c with `link` as the library arguments.
fn build(out: &str, link: &[&str]) -> PathBuf {
    let bin = target_dir().join(out);
    let st = Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(repo().join("tests/c/capi_abi.c"))
        .args(link)
        .status()
        .expect("gcc");
    assert!(st.success(), "building capi_abi.c with {link:?}");
    bin
}

fn run(bin: &Path, lib: Option<&Path>) -> String {
    let mut cmd = Command::new(bin);
    cmd.env_remove("LD_LIBRARY_PATH");
    if let Some(l) = lib {
        cmd.env("LD_LIBRARY_PATH", l);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{} failed: {}", bin.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_c_program_prints_the_same_on_c_librpma_and_on_rpma() {
    let lib = lib_dir();
    let c_built = build("capi_abi-librpma", &["-lrpma", "-libverbs"]);
    let on_c = run(&c_built, None);
    assert!(on_c.starts_with("functions 84\n"), "{on_c}");
    // The same binary, switched to rpma's library by LD_LIBRARY_PATH alone.
    let ldd = Command::new("ldd").arg(&c_built).env("LD_LIBRARY_PATH", &lib).output().unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(ldd.contains(&format!("librpma.so.0 => {}", lib.join("librpma.so.0").display())), "{ldd}");
    assert_eq!(run(&c_built, Some(&lib)), on_c, "the same binary on rpma's library");
    // Linked to rpma's shared library, and statically to librpma.a.
    let l = format!("-L{}", lib.display());
    let rpma_built = build("capi_abi-rpma", &[&l, "-lrpma", "-libverbs"]);
    assert_eq!(run(&rpma_built, Some(&lib)), on_c, "linked to rpma's librpma.so");
    let a = lib.join("librpma.a");
    let static_built = build(
        "capi_abi-static",
        &[a.to_str().unwrap(), "-libverbs", "-lrdmacm", "-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"],
    );
    assert_eq!(run(&static_built, None), on_c, "linked to rpma's librpma.a");
    println!("{on_c}");
}
