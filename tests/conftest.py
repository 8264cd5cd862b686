pytest_plugins = ["lorarl_dev.pytest_plugin"]
