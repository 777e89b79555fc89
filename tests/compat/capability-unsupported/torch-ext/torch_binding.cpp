// never compiled: the build is refused first
