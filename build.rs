// `sqlx::migrate!` embeds ./migrations at compile time; without this, a new migration file
// alone would not rebuild the crate (sqlx's documented build script).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
