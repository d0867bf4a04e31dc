from attn_cli.entry import main

main()
