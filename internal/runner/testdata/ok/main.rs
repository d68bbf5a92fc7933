fn main() {
    println!("OK");
}
