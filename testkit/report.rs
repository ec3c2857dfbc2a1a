//! What the training tutorials show while they run: a progress line on stderr and the
//! loss curve as an SVG picture.

use std::io::Write;

/// One progress line on stderr — `label [#####.....] done/total loss L` — redrawn in place
/// (the caller ends it with a newline when the stage is over).
pub fn progress(label: &str, done: usize, total: usize, loss: f64) {
    let width = 30;
    let filled = done * width / total.max(1);
    eprint!(
        "\r{label} [{}{}] {done:>3}/{total} loss {loss:.4}",
        "#".repeat(filled.min(width)),
        ".".repeat(width - filled.min(width))
    );
    let _ = std::io::stderr().flush();
}

/// `losses` as an SVG line chart titled `title` (the largest loss is added to it).
///
/// ```
/// let svg = rlx_testkit::report::loss_svg("loss per step", &[2.0, 1.0, 0.5]);
/// assert!(svg.contains("<polyline"));
/// ```
pub fn loss_svg(title: &str, losses: &[f64]) -> String {
    let (w, h, pad) = (640.0, 360.0, 40.0);
    let max = losses.iter().cloned().fold(f64::MIN, f64::max).max(1e-9);
    let n = losses.len().max(2) - 1;
    let points: Vec<String> = losses
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let x = pad + (w - 2.0 * pad) * i as f64 / n as f64;
            let y = h - pad - (h - 2.0 * pad) * l / max;
            format!("{x:.1},{y:.1}")
        })
        .collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"{pad}\" y=\"24\" font-family=\"sans-serif\" font-size=\"14\">{title} (max {max:.3})</text>\n\
         <polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"2\" points=\"{}\"/>\n\
         </svg>\n",
        points.join(" "),
        b = h - pad,
        r = w - pad,
    )
}
