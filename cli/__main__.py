from srgan.cli.app import main

main()
