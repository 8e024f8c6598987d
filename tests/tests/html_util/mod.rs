//! The HTML report rendered in headless Chromium: the DOM Chromium built, and how much of the
//! page is drawn beyond a width (the page must read at 1,280 px without scrolling sideways).

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use culprit_tests::*;

/// What Chromium made of a page.
pub struct Rendered {
    /// The DOM, serialised.
    pub dom: String,
    /// Pixels drawn (not white) right of [`PAGE_WIDTH`] in a window twice as wide.
    pub beyond: usize,
    /// The share of the screenshot drawn.
    pub drawn: f64,
}

/// The widest the page may be.
pub const PAGE_WIDTH: u32 = 1280;

/// Renders `path` in headless Chromium, `None` when Chromium is not installed (outside CI:
/// scripts/install-deps installs it, and in CI its absence fails).
pub fn render(path: &Path) -> Option<Rendered> {
    let Some(chromium) = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "Chromium is not installed (scripts/install-deps installs it)"
        );
        println!("skipped: Chromium is not installed (the page was checked parsed, not rendered)");
        return None;
    };
    let url = format!("file://{}", path.display());
    let headless = |extra: &[&str]| {
        let mut c = Command::new(chromium);
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args(extra)
        .arg(&url);
        c
    };
    let o = run_ok(&mut headless(&["--dump-dom"]));
    let dom = String::from_utf8_lossy(&o.stdout).into_owned();
    let shot = path.with_extension("png");
    let wide = 2 * PAGE_WIDTH;
    run_ok(&mut headless(&[
        &format!("--screenshot={}", shot.display()),
        &format!("--window-size={wide},1600"),
    ]));
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&shot).expect("the screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG screenshot");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader
        .next_frame(&mut buf)
        .expect("the screenshot's pixels");
    let px = info.color_type.samples();
    let width = info.width as usize;
    let pixels = &buf[..info.buffer_size()];
    let drawn = |p: &[u8]| p.iter().take(3).any(|&c| c < 200);
    let (mut coloured, mut beyond) = (0, 0);
    for (i, p) in pixels.chunks(px).enumerate() {
        if drawn(p) {
            coloured += 1;
            if i % width >= PAGE_WIDTH as usize {
                beyond += 1;
            }
        }
    }
    Some(Rendered {
        dom,
        beyond,
        drawn: coloured as f64 / (pixels.len() / px) as f64,
    })
}
