//! A headless Chromium for the web console's tests: Debian's `chromium`
//! driven through its `chromedriver` (both installed by
//! `scripts/setup-host`) on a free loopback port, with fantoccini as the
//! WebDriver client; screenshots written under `target/console/`. The
//! console's certificate is the test run's own: the browser accepts it
//! (`acceptInsecureCerts`). Killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

/// A browser session and its chromedriver.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session (1280×900).
    pub async fn start() -> Self {
        let port = vee_testkit::lab::free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; scripts/setup-host installs it)");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "chromedriver did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut caps = serde_json::Map::new();
        caps.insert("acceptInsecureCerts".into(), true.into());
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"]
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        Self { client, driver }
    }

    /// Goes to `url` and waits for `css` there (at most 30 s).
    pub async fn open(&self, url: &str, css: &str) {
        self.client.goto(url).await.unwrap();
        self.wait_for(css).await;
    }

    /// Waits (at most 30 s) for an element matching `css`.
    pub async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css} not on the page: {e}"))
    }

    /// The page's text.
    pub async fn text(&self) -> String {
        self.client.find(Locator::Css("body")).await.unwrap().text().await.unwrap()
    }

    /// Polls the script `js` (an expression) until it is true (at most
    /// `within`).
    pub async fn until(&self, js: &str, within: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < within {
            let v = self.client.execute(&format!("return !!({js});"), vec![]).await;
            if matches!(v, Ok(serde_json::Value::Bool(true))) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        false
    }

    /// Writes a screenshot of the page to `target/console/NAME.png`;
    /// its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let dir = vee_testkit::lab::repo_root().join("target").join("console");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        let png = self.client.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(&path, png).unwrap();
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
