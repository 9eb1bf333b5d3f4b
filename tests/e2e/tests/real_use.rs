//! Real programs on the mount: cp -a and diff -r, tar round trips, git, a Python venv with pip,
//! compiling and running a C program, and SQLite. Each skips (with a reason) when its tool is
//! missing.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use memofs_e2e::cli::sh;
use memofs_e2e::tree::{self, Detail};
use memofs_e2e::{ok, pattern, require_mount, skip, sys, which, Mount, Rng};

const LONG: Duration = Duration::from_secs(300);

/// The first of `tools` that is not installed.
fn need(tools: &[&'static str]) -> Option<&'static str> {
    tools.iter().copied().find(|t| which(t).is_none())
}

/// Run a shell script that must succeed.
#[track_caller]
fn shell(script: &str, cwd: &Path) -> String {
    let out = sh(script, Some(cwd), LONG);
    out.assert_success();
    out.stdout
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// A varied tree: nested directories, files of many sizes (some sparse), symlinks, hard links,
/// a FIFO, odd permissions, xattrs and nanosecond mtimes.
fn generate_tree(root: &Path, seed: u64) {
    let mut r = Rng::new(seed);
    ok!(fs::create_dir_all(root));
    let mut dirs = vec![root.to_path_buf()];
    for i in 0..40 {
        let parent = r.pick(&dirs).clone();
        let d = parent.join(format!("dir{i}"));
        ok!(fs::create_dir(&d));
        dirs.push(d);
    }
    let mut files = Vec::new();
    for i in 0..300u64 {
        let parent = r.pick(&dirs).clone();
        let f = parent.join(format!("file{i}.dat"));
        let len = match r.below(4) {
            0 => 0,
            1 => r.below(100),
            2 => r.below(20_000),
            _ => r.below(300_000),
        } as usize;
        ok!(fs::write(&f, pattern(seed ^ i, len)));
        files.push(f);
    }
    let sparse = root.join("sparse.img");
    let f = ok!(fs::File::create(&sparse));
    ok!(std::os::unix::fs::FileExt::write_all_at(
        &f,
        b"tail",
        10 << 20
    ));
    for (i, f) in files.iter().enumerate().step_by(17) {
        ok!(fs::hard_link(f, root.join(format!("hardlink{i}"))));
    }
    ok!(symlink("dir0", root.join("link-to-dir")));
    ok!(symlink("nowhere", root.join("dangling")));
    ok!(symlink("../file1.dat", dirs[1].join("up-link")));
    ok!(sys::mkfifo(root.join("fifo"), 0o640));
    for (i, f) in files.iter().enumerate().step_by(11) {
        ok!(sys::chmod(f, [0o600, 0o755, 0o444, 0o4755, 0o640][i % 5]));
        ok!(sys::setxattr(
            f,
            "user.origin",
            format!("file {i}").as_bytes(),
            0
        ));
    }
    ok!(sys::chmod(&dirs[3], 0o2750));
    ok!(sys::chown(&files[5], 1234, 5678));
    for (i, p) in files.iter().chain(dirs.iter().rev()).enumerate() {
        let t = sys::Ts::At(
            1_600_000_000 + i as i64 * 1000,
            (i as i64 * 7_919_113) % 1_000_000_000,
        );
        ok!(sys::utimensat(p, t, t, libc::AT_SYMLINK_NOFOLLOW));
    }
}

#[track_caller]
fn assert_same_tree(a: &Path, b: &Path, d: Detail, what: &str) {
    let ta = ok!(tree::describe(a, d), "walk {}", a.display());
    let tb = ok!(tree::describe(b, d), "walk {}", b.display());
    let diff = tree::diff(&ta, &tb, "source", "copy");
    assert!(
        diff.is_empty(),
        "{what}: {} differences, e.g.\n  {}",
        diff.len(),
        diff.iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

#[test]
fn cp_a_preserves_everything() {
    require_mount!();
    if let Some(tool) = need(&["cp"]) {
        skip!(Tool(tool));
    }
    let src = Mount::tmpfs(&["size=256m"]);
    generate_tree(&src.join("tree"), 11);
    let m = Mount::mem(&["size=512m"]);
    shell(
        &format!("cp -a {} {}", q(&src.join("tree")), q(&m.join("copy"))),
        m.path(),
    );
    let all = Detail {
        nlink: true,
        dir_size: false,
        mtime: true,
        content: true,
        xattrs: true,
    };
    assert_same_tree(&src.join("tree"), &m.join("copy"), all, "cp -a into memofs");
    // And back out again.
    shell(
        &format!("cp -a {} {}", q(&m.join("copy")), q(&src.join("back"))),
        m.path(),
    );
    assert_same_tree(
        &src.join("tree"),
        &src.join("back"),
        all,
        "cp -a out of memofs",
    );
}

#[test]
fn cp_and_diff_of_system_headers() {
    require_mount!();
    if let Some(tool) = need(&["cp", "diff"]) {
        skip!(Tool(tool));
    }
    let src = Path::new("/usr/include/linux");
    if !src.is_dir() {
        skip!(Tool("linux-libc-dev"), "/usr/include/linux not present");
    }
    let m = Mount::mem(&["size=512m"]);
    shell(
        &format!("cp -a {} {}", q(src), q(&m.join("linux"))),
        m.path(),
    );
    shell(
        &format!("diff -r {} {}", q(src), q(&m.join("linux"))),
        m.path(),
    );
    let d = Detail {
        nlink: false,
        dir_size: false,
        mtime: true,
        content: false,
        xattrs: false,
    };
    assert_same_tree(src, &m.join("linux"), d, "cp -a of /usr/include/linux");
}

#[test]
fn tar_round_trip() {
    require_mount!();
    if let Some(tool) = need(&["tar", "diff"]) {
        skip!(Tool(tool));
    }
    let src = Mount::tmpfs(&["size=256m"]);
    generate_tree(&src.join("tree"), 12);
    let m = Mount::mem(&["size=512m"]);
    // Pipe into the mount, archive inside the mount, extract inside the mount.
    shell(
        &format!(
            "mkdir x1 x2 && tar -C {} --xattrs --format=posix -cf - . | tar -C x1 --xattrs -xpf - \
             && tar -C x1 --xattrs --format=posix -cf inside.tar . && tar -C x2 --xattrs -xpf inside.tar \
             && tar -tf inside.tar | wc -l",
            q(&src.join("tree"))
        ),
        m.path(),
    );
    let d = Detail {
        nlink: true,
        dir_size: false,
        mtime: true,
        content: true,
        xattrs: true,
    };
    assert_same_tree(&src.join("tree"), &m.join("x1"), d, "tar piped into memofs");
    assert_same_tree(
        &src.join("tree"),
        &m.join("x2"),
        d,
        "tar archived and extracted inside memofs",
    );
    // diff -r cannot compare FIFOs; it compares the rest.
    ok!(fs::remove_file(m.join("x2/fifo")));
    ok!(fs::remove_file(m.join("x1/fifo")));
    shell("diff -r --no-dereference x1 x2", m.path());
}

#[test]
fn git_repository_inside_the_mount() {
    require_mount!();
    if let Some(tool) = need(&["git"]) {
        skip!(Tool(tool));
    }
    let m = Mount::mem(&["size=512m"]);
    let home = m.scratch().join("home");
    ok!(fs::create_dir_all(&home));
    let git = format!(
        "export HOME={} GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=e2e GIT_AUTHOR_EMAIL=e2e@example.invalid \
         GIT_COMMITTER_NAME=e2e GIT_COMMITTER_EMAIL=e2e@example.invalid; set -e;",
        q(&home)
    );
    generate_tree(&m.join("repo"), 13);
    ok!(fs::remove_file(m.join("repo/fifo"))); // git does not track FIFOs
    let out = shell(
        &format!(
            "{git} cd repo; git init -q; git add -A; git commit -qm first; \
             echo change >> \"$(git ls-files | grep /file1.dat)\"; git mv dir0 dir0-renamed; git rm -q file2.dat; \
             git commit -qam second; git gc -q; git fsck --strict --no-progress; \
             git status --porcelain --untracked-files=no; git log --oneline | wc -l; \
             git checkout -q HEAD~1 && git checkout -q - && git diff --stat HEAD~1 | tail -1"
        ),
        m.path(),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.contains(&"2"),
        "git log should show 2 commits; output:\n{out}"
    );
    assert!(
        out.contains("changed"),
        "git diff --stat should summarise changes; output:\n{out}"
    );
    // A clone within the mount, checked out with hard links to objects.
    shell(
        &format!(
            "{git} git clone -q repo clone && cd clone && git fsck --no-progress && \
             diff -r --no-dereference --exclude=.git ../repo ."
        ),
        m.path(),
    );
}

#[test]
fn python_venv_with_pip() {
    require_mount!();
    if let Some(tool) = need(&["python3"]) {
        skip!(Tool(tool));
    }
    let m = Mount::mem(&["size=1g"]);
    let probe = sh("python3 -c 'import venv, ensurepip'", None, LONG);
    if !probe.success() {
        skip!(
            Tool("python3-venv"),
            "python3 lacks venv/ensurepip: {}",
            probe.stderr.trim()
        );
    }
    shell("python3 -m venv venv", m.path());
    let out = shell("./venv/bin/pip --version", m.path());
    assert!(out.starts_with("pip "), "pip --version printed {out:?}");
    assert!(
        out.contains(&m.join("venv").display().to_string()),
        "pip should run from the venv: {out:?}"
    );
    let prefix = shell(
        "./venv/bin/python -c 'import sys; print(sys.prefix)'",
        m.path(),
    );
    assert_eq!(prefix.trim(), m.join("venv").display().to_string());
    // Byte-compiling writes .pyc files through rename; import them back.
    ok!(fs::write(m.join("mod.py"), "def f():\n    return 42\n"));
    let out = shell("./venv/bin/python -m compileall -q . >/dev/null && ./venv/bin/python -c 'import mod; print(mod.f())'", m.path());
    assert_eq!(out.trim(), "42");
}

#[test]
fn compile_and_run_a_c_program() {
    require_mount!();
    if let Some(tool) = need(&["cc"]) {
        skip!(Tool(tool));
    }
    let m = Mount::mem(&["size=256m"]);
    ok!(fs::write(
        m.join("hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"hello from memofs\"); return 0; }\n"
    ));
    let out = shell("cc -O1 -o hello hello.c && ./hello", m.path());
    assert_eq!(out.trim(), "hello from memofs");
}

#[test]
fn sqlite_database_inside_the_mount() {
    require_mount!();
    if let Some(tool) = need(&["python3"]) {
        skip!(Tool(tool));
    }
    let m = Mount::mem(&["size=256m"]);
    let script = r#"
import sqlite3
for mode in ("delete", "wal"):
    db = sqlite3.connect(f"test-{mode}.db")
    db.execute(f"pragma journal_mode={mode}")
    db.execute("create table t (k integer primary key, v text)")
    with db:
        db.executemany("insert into t (v) values (?)", [("x" * (i % 300),) for i in range(5000)])
    with db:
        db.execute("delete from t where k % 3 = 0")
    db.execute("vacuum")
    assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
    n = db.execute("select count(*) from t").fetchone()[0]
    db.close()
    db = sqlite3.connect(f"test-{mode}.db")
    assert db.execute("select count(*) from t").fetchone()[0] == n
    print(mode, n)
"#;
    ok!(fs::write(m.join("t.py"), script));
    let probe = sh("python3 -c 'import sqlite3'", None, LONG);
    if !probe.success() {
        skip!(Tool("python3-sqlite3"), "python3 has no sqlite3 module");
    }
    let out = shell("python3 t.py", m.path());
    assert_eq!(out.trim(), "delete 3334\nwal 3334");
}
