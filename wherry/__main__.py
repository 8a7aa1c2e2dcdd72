from wherry.cli.main import main

main()
