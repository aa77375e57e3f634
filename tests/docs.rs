//! The README and docs/ link to one another: every relative link names a
//! file that exists and, for a Markdown file, a heading it has (GitHub's
//! heading anchors). Checked by scripts/check-doc-links.py.

use std::process::Command;

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/scripts/check-doc-links.py"))
        .arg(root)
        .output()
        .expect("python3 runs scripts/check-doc-links.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "broken links:\n{text}");
    // The checker saw the links: a README and docs with none is a bug too.
    let checked: usize = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(checked >= 20, "only {checked} links checked:\n{text}");
}
