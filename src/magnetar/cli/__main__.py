from magnetar.cli.main import main

main()
