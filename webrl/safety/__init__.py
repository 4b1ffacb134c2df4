"""What a browser may reach: the allow-list and its URL reading, the navigation guard, the allow-list proxy, which key
goes where."""
