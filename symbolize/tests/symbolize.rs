//! The shared symbolizer on real binaries built with gcc at test time.

use std::path::PathBuf;
use std::process::Command;

use culprit_symbolize::{read_build_id, ImageAddr, Symbolizer};

fn build(src: &str, name: &str, flags: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("culprit-sym-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let out = dir.join(name);
    let st = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&c)
        .status()
        .unwrap();
    assert!(st.success());
    out
}

/// `nm` value of `sym` in `bin` (an ELF virtual address).
fn nm(bin: &PathBuf, sym: &str) -> u64 {
    let o = Command::new("nm").arg(bin).output().unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(sym))
        .unwrap_or_else(|| panic!("{sym} not in nm output"));
    u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
}

#[test]
fn static_and_global_functions_resolve_in_a_pie() {
    let src = "static int __attribute__((noinline)) hidden_helper(int x) { return x * 3; }\n\
               int visible(int x) { return hidden_helper(x) + 1; }\n\
               int main(int c, char **v) { (void)v; return visible(c); }\n";
    let bin = build(src, "pie", &["-O1", "-fPIE", "-pie", "-Wl,--build-id"]);
    let mut s = Symbolizer::new();
    let h = nm(&bin, "hidden_helper");
    let v = nm(&bin, "visible");
    assert_eq!(
        s.resolve(&bin, ImageAddr::Virt(h)).as_deref(),
        Some("hidden_helper")
    );
    // An address inside the function resolves to it too.
    assert_eq!(
        s.resolve(&bin, ImageAddr::Virt(v + 1)).as_deref(),
        Some("visible")
    );
    assert!(read_build_id(&bin).is_ok_and(|b| b.is_some_and(|b| b.len() == 20)));
    // Cached: a second lookup hits the cache.
    let before = s.cached();
    s.resolve(&bin, ImageAddr::Virt(h));
    assert_eq!(s.cached(), before);
}

#[test]
fn cpp_names_are_demangled() {
    let dir = std::env::temp_dir().join(format!("culprit-sym-cpp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("x.cc");
    std::fs::write(
        &c,
        "namespace ns { int __attribute__((noinline)) f(int x) { return x + 1; } }\n\
         int main(int c, char **) { return ns::f(c); }\n",
    )
    .unwrap();
    let out = dir.join("x");
    assert!(Command::new("g++")
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(&c)
        .status()
        .unwrap()
        .success());
    let addr = nm(&out, "_ZN2ns1fEi");
    let mut s = Symbolizer::new();
    assert_eq!(
        s.resolve(&out, ImageAddr::Virt(addr)).as_deref(),
        Some("ns::f(int)")
    );
}

#[test]
fn missing_image_degrades_to_none() {
    let mut s = Symbolizer::new();
    let p = PathBuf::from("/nonexistent/libnothing.so");
    assert_eq!(s.resolve(&p, ImageAddr::Virt(0x1000)), None);
    assert_eq!(s.resolve(&p, ImageAddr::FileOffset(0x1000)), None);
}

/// File offset of virtual address `vaddr` in `bin`, from `readelf -lW`'s LOAD segments.
fn file_offset(bin: &PathBuf, vaddr: u64) -> u64 {
    let o = Command::new("readelf")
        .arg("-lW")
        .arg(bin)
        .output()
        .unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    for line in text.lines().filter(|l| l.trim_start().starts_with("LOAD")) {
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(5)
            .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap())
            .collect();
        let (off, va, filesz) = (f[0], f[1], f[3]);
        if vaddr >= va && vaddr < va + filesz {
            return vaddr - va + off;
        }
    }
    panic!("{vaddr:#x} in no LOAD segment");
}

#[test]
fn stripped_static_functions_get_their_start_from_the_unwind_table() {
    let src = "static volatile int sink;\n\
               static void __attribute__((noinline)) alpha(int n) { for (int i = 0; i < n; i++) sink += i; }\n\
               static void __attribute__((noinline)) beta(int n) { for (int i = 0; i < n; i++) sink ^= i; }\n\
               int main(int c, char **v) { (void)v; alpha(c); beta(c); return 0; }\n";
    let bin = build(src, "unwind", &["-O1", "-fPIE", "-pie"]);
    let stripped = bin.with_file_name("unwind-stripped");
    assert!(Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&stripped)
        .arg(&bin)
        .status()
        .unwrap()
        .success());
    let mut s = Symbolizer::new();
    for f in ["alpha", "beta"] {
        let start = file_offset(&bin, nm(&bin, f));
        // No symbol covers it in the stripped file…
        assert_eq!(s.resolve(&stripped, ImageAddr::FileOffset(start + 4)), None);
        // …but the unwind table knows where the function starts.
        assert_eq!(s.function_start(&stripped, start + 4), Some(start), "{f}");
        assert_eq!(s.function_start(&stripped, start), Some(start), "{f}");
    }
    // Not an ELF file: no table, no panic.
    assert_eq!(
        s.function_start(std::path::Path::new("/etc/hostname"), 10),
        None
    );
}

#[test]
fn a_stripped_binary_with_a_debug_link_is_named_from_its_debug_file() {
    let src = "static volatile int sink;\n\
               static void __attribute__((noinline)) gamma_fn(int n) { for (int i = 0; i < n; i++) sink += i; }\n\
               int main(int c, char **v) { (void)v; gamma_fn(c); return 0; }\n";
    let bin = build(src, "dbglink", &["-O1", "-g", "-fPIE", "-pie"]);
    let dir = bin.parent().unwrap();
    let debug = dir.join("dbglink.debug");
    let stripped = dir.join("dbglink-stripped");
    let run = |args: &[&std::ffi::OsStr]| {
        assert!(Command::new("objcopy")
            .args(args)
            .status()
            .unwrap()
            .success());
    };
    run(&[
        "--only-keep-debug".as_ref(),
        bin.as_os_str(),
        debug.as_os_str(),
    ]);
    run(&[
        "--strip-all".as_ref(),
        bin.as_os_str(),
        stripped.as_os_str(),
    ]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    // objcopy records the debug file's base name; the symbolizer looks next to the binary.
    run(&[link.as_ref(), stripped.as_os_str()]);
    let start = file_offset(&bin, nm(&bin, "gamma_fn"));
    let mut s = Symbolizer::new();
    assert_eq!(
        s.resolve(&stripped, ImageAddr::FileOffset(start + 2))
            .as_deref(),
        Some("gamma_fn"),
        "the name comes from the debug file"
    );
}

/// Descriptors of this process open on files whose path starts with `prefix` (deleted ones
/// included: their link ends in " (deleted)").
fn open_fds_under(prefix: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t.starts_with(prefix))
        .count()
}

const TWO_FUNCS: &str = "int __attribute__((noinline)) one(int x) { return x * 3; }\n\
                         int main(int c, char **v) { (void)v; return one(c); }\n";

#[test]
fn least_recently_used_images_are_closed_beyond_the_cap() {
    let bin = build(TWO_FUNCS, "lru", &["-O1"]);
    let one = nm(&bin, "one");
    let dir = bin.parent().unwrap().join("lru-copies");
    std::fs::create_dir_all(&dir).unwrap();
    let copies: Vec<PathBuf> = (0..5)
        .map(|i| {
            let c = dir.join(format!("copy{i}"));
            std::fs::copy(&bin, &c).unwrap();
            c
        })
        .collect();
    let mut s = Symbolizer::new().with_max_open_images(2);
    for c in &copies {
        assert_eq!(s.resolve(c, ImageAddr::Virt(one)).as_deref(), Some("one"));
    }
    assert_eq!(s.open_images(), 2);
    // Two descriptors per open image: the symbolizer's own (opened safely) and blazesym's,
    // which reads it again through /proc/self/fd/N.
    assert!(open_fds_under(&dir) <= 4, "{} open", open_fds_under(&dir));
    // A closed image comes back when asked for.
    assert_eq!(
        s.resolve(&copies[0], ImageAddr::Virt(one)).as_deref(),
        Some("one")
    );
    assert!(open_fds_under(&dir) <= 4);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_replaced_image_is_closed_when_forgotten() {
    let bin = build(TWO_FUNCS, "replaced", &["-O1"]);
    let one = nm(&bin, "one");
    let dir = bin.parent().unwrap().join("replaced-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("prog");
    let mut s = Symbolizer::new();
    for _ in 0..5 {
        // A new inode at the same path, as a rebuilt program gets.
        let tmp = dir.join("prog.new");
        std::fs::copy(&bin, &tmp).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        s.forget_image(&path);
        assert_eq!(
            s.resolve(&path, ImageAddr::Virt(one)).as_deref(),
            Some("one")
        );
    }
    // Only the current file is open (the symbolizer's descriptor and blazesym's), none of the
    // replaced (deleted) ones.
    assert_eq!(open_fds_under(&dir), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn instrumented_binaries_name_the_hook_in_their_dynamic_symbols() {
    use culprit_symbolize::names_dynamic_symbol;
    let src = "int work(int x) { return x + 1; }\nint main(int c, char **v) { (void)v; return work(c); }\n";
    let hooked = build(src, "hooked", &["-O0", "-finstrument-functions"]);
    let plain = build(src, "plain", &["-O0"]);
    let hook = "__cyg_profile_func_enter";
    assert_eq!(names_dynamic_symbol(&hooked, hook), Some(true));
    assert_eq!(names_dynamic_symbol(&plain, hook), Some(false));
    assert_eq!(
        names_dynamic_symbol(std::path::Path::new("/etc/hostname"), hook),
        None
    );
    assert_eq!(
        names_dynamic_symbol(std::path::Path::new("/nonexistent"), hook),
        None
    );
}

/// Start of the PLT stub `sym@plt` in `bin`, from `objdump -d` (the oracle: symbol tables do
/// not cover the PLT).
fn plt_stub(bin: &PathBuf, sym: &str) -> Option<u64> {
    let o = Command::new("objdump").arg("-d").arg(bin).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let want = format!("<{sym}@plt>:");
    let line = text.lines().find(|l| l.trim_end().ends_with(&want))?;
    u64::from_str_radix(line.split_whitespace().next()?, 16).ok()
}

/// The PLT stubs through which instrumented code calls the hooks are named `hook@plt` (perf's
/// name), by address and by file offset, not `_init` (the nearest symbol before the PLT), so
/// that their samples count as tracing's cost; with and without IBT's `.plt.sec`.
#[test]
fn plt_stubs_are_named_by_their_symbol() {
    let src = "#include <string.h>\n\
               static int __attribute__((noinline)) leaf(int x) { return x * 3; }\n\
               int main(int c, char **v) { return leaf(c) + (int)strlen(v[0]); }\n";
    for (name, flags) in [
        ("plt", &["-O1", "-finstrument-functions"][..]),
        (
            "pltsec",
            &[
                "-O1",
                "-finstrument-functions",
                "-fcf-protection",
                "-Wl,-z,ibtplt",
            ][..],
        ),
        ("now", &["-O1", "-finstrument-functions", "-Wl,-z,now"][..]),
    ] {
        let bin = build(src, name, flags);
        let mut s = Symbolizer::new();
        for sym in [
            "__cyg_profile_func_enter",
            "__cyg_profile_func_exit",
            "strlen",
        ] {
            let at = plt_stub(&bin, sym).unwrap_or_else(|| panic!("{name}: no {sym}@plt"));
            let want = format!("{sym}@plt");
            for a in [
                ImageAddr::Virt(at),
                ImageAddr::Virt(at + 6),
                ImageAddr::FileOffset(file_offset(&bin, at) + 3),
            ] {
                assert_eq!(
                    s.resolve(&bin, a).as_deref(),
                    Some(want.as_str()),
                    "{name}: {a:?}"
                );
            }
        }
        // The program's own functions still resolve as before.
        let main = nm(&bin, "main");
        assert_eq!(
            s.resolve(&bin, ImageAddr::Virt(main + 1)).as_deref(),
            Some("main")
        );
    }
}

/// Runs `f` on a thread of its own; panics if it has not returned within `secs` (a blocked
/// `open` would hang the test instead of failing it).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what}: still blocked after {secs} s"))
}

fn mkfifo(p: &std::path::Path) {
    let _ = std::fs::remove_file(p);
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

/// Issue 30: a binary whose path became a FIFO (planted by another user) is refused at once
/// with a note, never opened; the same symbolizer goes on with other images.
#[test]
fn a_binary_replaced_by_a_fifo_is_refused_at_once() {
    let src = "int __attribute__((noinline)) work(int x) { return x * 7; }\n\
               int main(int c, char **v) { (void)v; return work(c); }\n";
    let bin = build(src, "fifo_victim", &["-O1"]);
    let good = build(src, "fifo_bystander", &["-O1"]);
    let addr = nm(&bin, "work");
    mkfifo(&bin);
    let (name, notes, other, id) = within(5, "symbolizing a FIFO", move || {
        let mut s = Symbolizer::new();
        let name = s.resolve(&bin, ImageAddr::Virt(addr));
        let notes = s.take_notes();
        let other = s.resolve(&good, ImageAddr::Virt(addr));
        (
            name,
            notes,
            other,
            read_build_id(&bin).map_err(|e| e.to_string()),
        )
    });
    assert_eq!(name, None);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("a FIFO, not a regular file"), "{notes:?}");
    assert_eq!(other.as_deref(), Some("work"));
    assert!(id.is_err_and(|e| e.contains("FIFO")));
}

/// Issue 30: blazesym follows a stripped binary's debug link to `<its dir>/<name>.debug`; in a
/// directory other users can write, a FIFO planted there would block it for ever, so the
/// symbolizer reads no DWARF through it (the function stays unnamed, at once). In a directory
/// only its owner writes, the same link is followed and names the function.
#[test]
fn debug_links_are_followed_only_into_trusted_directories() {
    let src = "static int __attribute__((noinline)) hidden(int x) { return x * 5; }\n\
               int main(int c, char **v) { (void)v; return hidden(c); }\n";
    let full = build(src, "dbg_full", &["-O1", "-g"]);
    let addr = nm(&full, "hidden");
    let base = std::env::temp_dir().join(format!("culprit-sym-dbg-{}", std::process::id()));
    for (tag, mode) in [("trusted", 0o755), ("open", 0o777)] {
        let dir = base.join(tag);
        std::fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("prog");
        let dbg = dir.join("prog.debug");
        std::fs::copy(&full, &bin).unwrap();
        let run = |args: &[&std::ffi::OsStr]| {
            assert!(Command::new(args[0])
                .args(&args[1..])
                .status()
                .unwrap()
                .success());
        };
        run(&[
            "objcopy".as_ref(),
            "--only-keep-debug".as_ref(),
            bin.as_os_str(),
            dbg.as_os_str(),
        ]);
        run(&["strip".as_ref(), "--strip-all".as_ref(), bin.as_os_str()]);
        let link = format!("--add-gnu-debuglink={}", dbg.display());
        run(&["objcopy".as_ref(), link.as_ref(), bin.as_os_str()]);
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        if tag == "open" {
            mkfifo(&dbg);
        }
        let b = bin.clone();
        let name = within(5, "following a debug link", move || {
            Symbolizer::new().resolve(&b, ImageAddr::Virt(addr))
        });
        match tag {
            "trusted" => assert_eq!(name.as_deref(), Some("hidden"), "DWARF through the link"),
            _ => assert_eq!(name, None),
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}
