pytest_plugins = ["lorarl.testing.pytest_plugin"]
