{
  "targets": [
    {
      "target_name": "original_dst",
      "sources": ["original_dst.c"],
      "cflags": ["-Wall", "-Wextra", "-O2"]
    }
  ]
}
