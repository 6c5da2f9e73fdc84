print("siwa-notify")
